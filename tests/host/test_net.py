"""app/host/net.fetch: a URL a request or a row names reaches public addresses only (after DNS, on every redirect),
within a time and size cap; a real HTTP server on loopback counts what reaches it."""

import http.server
import ipaddress
import threading
import time

import pytest

from app.host.net import fetch, public_address


class _Server:
    """A loopback HTTP server: /img answers bytes, /slow trickles, /big is large, /to?u=URL redirects."""

    def __init__(self):
        self.hits = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits.append(self.path)
                if self.path.startswith("/to?u="):
                    self.send_response(302)
                    self.send_header("Location", self.path[len("/to?u="):])
                    self.end_headers()
                elif self.path == "/slow":
                    self.send_response(200)
                    self.end_headers()
                    for _ in range(40):
                        self.wfile.write(b"x" * 10)
                        self.wfile.flush()
                        time.sleep(0.1)
                elif self.path == "/big":
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"x" * (3 << 20))
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", "5")
                    self.end_headers()
                    self.wfile.write(b"hello")

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path, host="127.0.0.1"):
        return f"http://{host}:{self.port}{path}"


@pytest.fixture(scope="module")
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()


ONLY_127_0_0_1 = staticmethod(lambda ip: ip == ipaddress.ip_address("127.0.0.1"))


def test_loopback_private_and_link_local_are_refused_before_any_connection(server):
    before = len(server.hits)
    for url, kind in ((server.url("/img"), "loopback"), (server.url("/img", "localhost"), "loopback"),
                      ("http://10.0.0.1/x.png", "private"), ("http://169.254.169.254/latest/meta-data", "link-local"),
                      ("http://[::1]:9/x.png", "loopback"), ("http://192.168.1.1/x.png", "private")):
        with pytest.raises(ValueError, match=f"points at a {kind}.*only public addresses are fetched"):
            fetch(url)
    assert len(server.hits) == before  # nothing reached the server: refused after DNS, before connecting


def test_each_redirect_is_checked_as_the_first_url_was(server):
    allow = ONLY_127_0_0_1.__func__
    assert fetch(server.url("/img"), allow=allow) == b"hello"
    assert fetch(server.url(f"/to?u={server.url('/img')}"), allow=allow) == b"hello"  # an allowed hop
    for target in (server.url("/img", "127.0.0.2"), "http://10.0.0.1/x.png", "http://169.254.169.254/"):
        with pytest.raises(ValueError, match="only public addresses are fetched"):
            fetch(server.url(f"/to?u={target}"), allow=allow)
    with pytest.raises(ValueError, match="redirects more than 3 times"):
        loop = server.url("/to?u=" + server.url("/to?u=" + server.url("/to?u=" + server.url("/to?u=/img"))))
        fetch(loop, allow=allow)


def test_a_slow_or_large_answer_is_cut_at_the_caps(server):
    allow = ONLY_127_0_0_1.__func__
    t = time.monotonic()
    with pytest.raises(ValueError, match="took longer than 1 s"):
        fetch(server.url("/slow"), allow=allow, timeout=1.0)
    assert time.monotonic() - t < 2.5
    with pytest.raises(ValueError, match="larger than 1 MB"):
        fetch(server.url("/big"), allow=allow, max_bytes=1 << 20)
    with pytest.raises(ValueError, match="not an http"):
        fetch("file:///etc/passwd")


def test_public_addresses():
    assert public_address(ipaddress.ip_address("8.8.8.8"))
    assert not public_address(ipaddress.ip_address("fe80::1")) and not public_address(ipaddress.ip_address("0.0.0.0"))


def test_one_port_check_for_ipv4_and_ipv6_and_one_exposure_rule():
    """`ui` and `serve` share these: a held port is one line on IPv4 and IPv6 alike (the UI's check was IPv4 only:
    '::1' failed with an address-family error), a number that is no port is one line, and a host beyond this
    machine without its guard is refused with the guard named."""
    import socket

    from app.errors import UserError
    from app.host.net import check_exposure, check_port

    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            held = socket.socket(family, socket.SOCK_STREAM)
            held.bind((host, 0))
        except OSError:
            continue  # no IPv6 on this machine
        with held:
            held.listen()
            port = held.getsockname()[1]
            with pytest.raises(UserError, match=f"cannot listen on {host}:{port} .*pass another --port"):
                check_port(host, port, 7860)
        check_port(host, port, 7860)  # free again
    with pytest.raises(UserError, match="--port 99999 is not a TCP port; pass one from 1 to 65535 \\(default 8000\\)"):
        check_port("127.0.0.1", 99999, 8000)
    with pytest.raises(UserError, match="--host 0.0.0.0 serves the model beyond this machine; add --api-key KEY"):
        check_exposure("0.0.0.0", False, "the model", "--api-key KEY")
    check_exposure("0.0.0.0", True, "the model", "--api-key KEY")
    check_exposure("::1", False, "the UI", "--auth USER:PASS")
