"""Which addresses are this machine: the one rule the UI, the API server and the judge's --local-only check use.
Decided without DNS (a lookup is itself a trip to the network). Standard library only."""

from __future__ import annotations

import ipaddress
import socket

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


def is_this_machine(host: str) -> bool:
    """Loopback, this machine's own host name, or the any-address (a server bound here)."""
    return is_loopback(host) or host.lower() in {socket.gethostname().lower(), "0.0.0.0", "::"}
