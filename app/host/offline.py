"""Staying off the network: the offline flags a command sets before the libraries load (--local-only), Gradio's
telemetry off for the UI, and a load forced offline for a moment (``offline``).

Owns: the offline flags (OFFLINE_ENV), reading HF_HUB_OFFLINE, and the only patch of the hub libraries' offline
constants (restored on exit). Must not import anything but the standard library at module level: the CLI calls
``apply_local_only`` before huggingface_hub, transformers or datasets are imported (they read these flags at import
time). The libraries' noise settings are app/host/process.py's.
"""

from __future__ import annotations

import functools
import os
import socket
import urllib.parse
from contextlib import contextmanager

# Everything that keeps the HF stack, Gradio and friends off the network and from reporting usage.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "DO_NOT_TRACK": "1",
}


def apply_local_only(enabled: bool) -> None:
    """Must run before transformers / datasets / huggingface_hub are imported: they read these at import time."""
    if enabled:
        os.environ.update(OFFLINE_ENV)


def no_telemetry() -> None:
    """The UI's process: Gradio reports no usage (it reads these when it is imported), online or not."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ.setdefault("DO_NOT_TRACK", "1")


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host (HF_ENDPOINT, default huggingface.co) takes a TCP connection within ``timeout``: one
    quick probe per process, so an unreachable hub is one line in seconds, not a minute of the libraries' retries."""
    url = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def hub_offline() -> bool:
    """Whether the hub is off limits for this process (HF_HUB_OFFLINE, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


@contextmanager
def offline(enabled: bool):
    """Offline mode for the duration of a load, also when ``datasets`` was imported before the flag was known
    (both libraries read the variables at import time, so the module constants are patched too)."""
    if not enabled:
        yield
        return
    import datasets.config as dcfg
    import huggingface_hub.constants as hcst

    env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    saved = (dcfg.HF_HUB_OFFLINE, dcfg.HF_DATASETS_OFFLINE, hcst.HF_HUB_OFFLINE)
    os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    dcfg.HF_HUB_OFFLINE = dcfg.HF_DATASETS_OFFLINE = hcst.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        dcfg.HF_HUB_OFFLINE, dcfg.HF_DATASETS_OFFLINE, hcst.HF_HUB_OFFLINE = saved
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
