"""`qlora-app ui`: start the Gradio app with safe defaults.

Loopback only unless --host says otherwise, no share link unless --share, optional USER:PASS auth, analytics off,
uploads size-limited, and Gradio may serve files only from the runs folder and its upload folder (never the repo
or the home directory).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from app.errors import UserError

MAX_UPLOAD = "200mb"  # a dataset file; anything bigger belongs on disk, passed as a path


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    if not auth:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise UserError("--auth needs the form USER:PASS, e.g. --auth alice:s3cret")
    return user, password


def launch_kwargs(host: str, port: int, share: bool, auth: str | None, runs_dir: Path) -> dict:
    """Everything passed to Blocks.launch (separate so tests can check the safe defaults)."""
    from app.ui.handlers import UPLOAD_DIR

    runs_dir = Path(runs_dir).resolve()
    return dict(
        server_name=host, server_port=port, share=bool(share), auth=parse_auth(auth),
        allowed_paths=[str(runs_dir), str(runs_dir / UPLOAD_DIR)], max_file_size=MAX_UPLOAD,
        show_error=True, enable_monitoring=False, mcp_server=False, run_history=False, ssr_mode=False,
        footer_links=[], quiet=False,
    )


def launch(host: str = "127.0.0.1", port: int = 7860, share: bool = False, auth: str | None = None,
           runs_dir: Path = Path("runs"), local_only: bool = False, block: bool = True):
    """Build and serve the app. With block=False returns the running Blocks (tests; call .close() and
    .jobs.shutdown())."""
    # Before gradio is imported: it reads these at import time.
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ.setdefault("DO_NOT_TRACK", "1")
    from app.ui.app import build_app

    kwargs = launch_kwargs(host, port, share, auth, runs_dir)
    demo = build_app(runs_dir, local_only=local_only)
    atexit.register(demo.jobs.shutdown)  # a UI closed with Ctrl-C still stops its run gracefully
    demo.queue(default_concurrency_limit=4)
    demo.launch(prevent_thread_lock=not block, **kwargs)
    return demo
