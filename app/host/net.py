"""Addresses: which are this machine (the one rule the UI, the API server and the judge's --local-only check use,
decided without DNS: a lookup is itself a trip to the network), and the one way to fetch a URL that a request or a
row names (``fetch``: public addresses only unless told, checked after DNS and on every redirect, a few seconds and a
size cap). Standard library only."""

from __future__ import annotations

import ipaddress
import socket

from app.errors import UserError

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """A loopback name or address (a host name that may resolve anywhere is not).

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, guarded: bool, what: str, guard: str) -> None:
    """One line when ``what`` (the UI, the model) would listen beyond this machine without ``guard`` (a login, a
    key): the one rule `ui` and `serve` check before anything loads."""
    if not is_loopback(host) and not guarded:
        raise UserError(f"--host {host} serves {what} beyond this machine; add {guard}, or use --host 127.0.0.1")


def check_port(host: str, port: int, default: int) -> None:
    """A port that is no TCP port, or that another process holds, is one line before anything loads (not a banner,
    minutes of loading, then the server's own traceback); IPv4 and IPv6 hosts alike. Bound as the servers bind:
    a port in TIME_WAIT is free."""
    if not 1 <= port <= 65535:
        raise UserError(f"--port {port} is not a TCP port; pass one from 1 to 65535 (default {default})")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port} ({e.strerror or e}); pass another --port, or stop what "
                            "holds it") from None


def is_this_machine(host: str) -> bool:
    """Loopback, this machine's own host name, or the any-address (a server bound here)."""
    return is_loopback(host) or host.lower() in {socket.gethostname().lower(), "0.0.0.0", "::"}


# ---------------------------------------------------------------------------------------------- fetching a URL
# A URL a request or a row names is fetched by ``fetch`` only: every address it connects to (each redirect's too) is
# checked after DNS resolution and connected to as checked (a name that resolves elsewhere a moment later cannot
# slip through), within a size and a time cap, so a key holder cannot make the host reach this machine, its network
# or a cloud's metadata service, nor stall it.

FETCH_TIMEOUT_S = 5.0  # the whole fetch, redirects and body included
FETCH_MAX_BYTES = 20 << 20  # a picture larger than this is no picture a model reads
FETCH_REDIRECTS = 3


def public_address(ip) -> bool:
    """An address on the public internet: not loopback, private, link-local (169.254.x: cloud metadata), shared,
    reserved, multicast or unspecified; an IPv4 address inside IPv6 is judged as itself.

    >>> [public_address(ipaddress.ip_address(a)) for a in ("93.184.216.34", "127.0.0.1", "10.1.2.3", "169.254.169.254",
    ...                                                     "::ffff:192.168.0.1", "::1", "100.64.0.1")]
    [True, False, False, False, False, False, False]
    """
    inner = getattr(ip, "ipv4_mapped", None)
    ip = inner or ip
    return ip.is_global and not ip.is_multicast


def address_kind(ip) -> str:
    """What a refused address is, in the words a user knows."""
    ip = getattr(ip, "ipv4_mapped", None) or ip
    for kind, yes in (("loopback (this machine)", ip.is_loopback), ("link-local", ip.is_link_local),
                      ("private", ip.is_private), ("multicast", ip.is_multicast)):
        if yes:
            return kind
    return "non-public"


def fetch(url: str, *, allow=public_address, timeout: float = FETCH_TIMEOUT_S, max_bytes: int = FETCH_MAX_BYTES,
          redirects: int = FETCH_REDIRECTS) -> bytes:
    """The body of an http(s) URL, or ValueError saying in a few words why not (the caller puts it in its line).
    ``allow(ip)``: which resolved addresses may be reached (public ones by default); every address the name resolves
    to must pass, and the connection goes to the checked address."""
    import http.client
    import time
    import urllib.parse

    deadline = time.monotonic() + timeout
    for _ in range(redirects + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("is not an http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            raise ValueError(f"names a host that does not resolve ({parts.hostname})") from None
        addrs = [ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos]
        refused = next((a for a in addrs if not allow(a)), None)
        if refused is not None:
            raise ValueError(f"points at a {address_kind(refused)} address ({refused}): only public addresses "
                             "are fetched")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ValueError(f"took longer than {timeout:g} s")
        conn = _pinned(parts.scheme, parts.hostname, port, str(addrs[0]), left)
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", path, headers={"User-Agent": "qlora-app", "Accept": "image/*"})
            resp = conn.getresponse()
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                url = urllib.parse.urljoin(url, resp.getheader("Location"))
                continue
            if resp.status != 200:
                raise ValueError(f"answered HTTP {resp.status}")
            size = resp.getheader("Content-Length")
            if size and size.isdigit() and int(size) > max_bytes:
                raise ValueError(f"is larger than {max_bytes >> 20} MB")
            body = bytearray()
            while chunk := resp.read1(64 << 10):
                body += chunk
                if len(body) > max_bytes:
                    raise ValueError(f"is larger than {max_bytes >> 20} MB")
                if time.monotonic() > deadline:
                    raise ValueError(f"took longer than {timeout:g} s")
                conn.raw_sock.settimeout(max(deadline - time.monotonic(), 0.01))  # http.client may drop .sock
            return bytes(body)
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                raise ValueError(f"took longer than {timeout:g} s") from None
            raise ValueError(f"could not be fetched ({type(e).__name__})") from None
        finally:
            conn.close()
    raise ValueError(f"redirects more than {redirects} times")


def _pinned(scheme: str, host: str, port: int, ip: str, timeout: float):
    """An HTTP(S) connection to ``ip`` that speaks to ``host`` (its Host header, TLS name and certificate check)."""
    import http.client

    base = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection

    class Pinned(base):
        def connect(self):
            sock = socket.create_connection((ip, self.port), self.timeout)
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host) if scheme == "https" else sock
            self.raw_sock = self.sock

    return Pinned(host, port, timeout=timeout)
