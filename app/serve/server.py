"""Starting the API server: who may reach it, the line that says where it is, and uvicorn.

Loopback by default. Beyond loopback an API key is required (the UI asks for --auth the same way); the key comes from
--api-key or QLORA_APP_API_KEY. --local-only loads the run's base from disk only.
"""

from __future__ import annotations

import os
import threading

from app.host.net import check_exposure, check_port, is_loopback

KEY_ENV = "QLORA_APP_API_KEY"


def api_key(given: str | None) -> str | None:
    return given or os.environ.get(KEY_ENV) or None


def check_serving(host: str, port: int, key: str | None) -> None:
    """Everything about where a server binds, before any model loads (either engine)."""
    check_exposure(host, bool(key), "the model", f"--api-key KEY (or set {KEY_ENV})")
    check_port(host, port, 8000)


def banner(engine, host: str, port: int, key: str | None) -> str:
    """Where the server is, and a client snippet to paste."""
    shown = "[::1]" if host == "::1" else host
    url = f"http://{shown}:{port}/v1"
    adapter = next(n for n, side in engine.names.items() if side == "adapter")
    base = next(n for n, side in engine.names.items() if side == "base")
    where = "this machine only" if is_loopback(host) else "reachable beyond this machine; requests need the key"
    return (f"serving {adapter} (the adapter) and {base} (its base) on {url} ({where})\n"
            "from openai import OpenAI\n"
            f"client = OpenAI(base_url=\"{url}\", api_key=\"{'YOUR_KEY' if key else 'none'}\")\n"
            f"print(client.chat.completions.create(model=\"{adapter}\", messages=[{{\"role\": \"user\", "
            "\"content\": \"Hello\"}]).choices[0].message.content)")


def server(engine, host: str, port: int, key: str | None):
    """A uvicorn Server for the engine's API (not started)."""
    import uvicorn

    from app.serve.api import build_api  # fastapi: only when a server starts, not for `qlora-app --help`

    return uvicorn.Server(uvicorn.Config(build_api(engine, key), host=host, port=port, log_level="warning",
                                         access_log=False))


def start_in_thread(engine, host: str, port: int, key: str | None = None):
    """(server, thread): the API served from a thread, ready when this returns (tests, notebooks)."""
    import time

    srv = server(engine, host, port, key)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(400):
        if srv.started:
            return srv, thread
        time.sleep(0.025)
    raise RuntimeError(f"the API server did not start on {host}:{port}")
