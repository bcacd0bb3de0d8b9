"""What a request's image_url may make the server fetch (app/serve/requests.images): public addresses only (a
loopback, a private and a redirecting URL are each one 400 and nothing reaches the target), nothing under the
offline settings, internal addresses only when the server was started to allow them."""

import base64
import http.server
import io
import threading

import pytest
from PIL import Image

from app.serve import requests as R


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "blue").save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def picture_server():
    hits = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            if self.path.startswith("/to"):
                self.send_response(302)
                self.send_header("Location", "http://10.255.255.1/cat.png")
                self.end_headers()
                return
            body = _png()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()


def _body(url):
    return {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": "colour?"}]}]}


def test_internal_urls_are_refused_and_nothing_reaches_them(picture_server, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    base, hits = picture_server
    for url, kind in ((f"{base}/cat.png", "loopback"), ("http://10.0.0.7/cat.png", "private"),
                      ("http://169.254.169.254/latest/meta-data/", "link-local"),
                      (f"{base.replace('127.0.0.1', 'localhost')}/cat.png", "loopback")):
        with pytest.raises(R.BadRequest, match=f"this image_url is a URL that points at a {kind}.*data URL") as e:
            R.images(_body(url), local_only=False)
        assert e.value.param == "messages[0].content[0].image_url"
    assert hits == []


def test_the_offline_settings_and_the_opt_in(picture_server, monkeypatch):
    base, hits = picture_server
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(R.BadRequest, match="not fetched by this server .*HF_HUB_OFFLINE"):
        R.images(_body(f"{base}/cat.png"), local_only=False, fetch_internal=True)
    assert hits == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    [img] = R.images(_body(f"{base}/cat.png"), local_only=False, fetch_internal=True)  # serve --fetch-internal-urls
    assert img.getpixel((0, 0)) == (0, 0, 255) and hits == ["/cat.png"]
    data = "data:image/png;base64," + base64.b64encode(_png()).decode()
    assert len(R.images(_body(data), local_only=True)) == 1  # a data URL is never a fetch


def test_a_redirect_to_a_private_address_is_refused(picture_server, monkeypatch):
    """The first hop may be allowed (here: internal URLs opened, so a public host can be played by loopback); the
    redirect's target is checked again as it resolves."""
    import app.serve.requests as mod

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    base, hits = picture_server
    import ipaddress

    monkeypatch.setattr(mod, "public_address", lambda ip: ip == ipaddress.ip_address("127.0.0.1"))
    with pytest.raises(R.BadRequest, match="points at a private address \\(10.255.255.1\\)"):
        R.images(_body(f"{base}/to"), local_only=False)
    assert hits[-1] == "/to"
