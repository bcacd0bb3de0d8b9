"""`qlora-app ui`: start the Gradio app with safe defaults.

Loopback only unless --host says otherwise, no share link unless --share, optional USER:PASS auth, analytics off,
uploads size-limited, and Gradio may serve files only from the runs folder and its upload folder (never the repo
or the home directory).
"""

from __future__ import annotations

import atexit
from pathlib import Path

from app.errors import UserError
from app.host.net import check_exposure, check_port, is_loopback
from app.ui.app import CSS, build_app
from app.ui.data_form import UPLOAD_DIR

MAX_UPLOAD = "200mb"  # a dataset file; anything bigger belongs on disk, passed as a path


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    if not auth:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise UserError("--auth needs the form USER:PASS, e.g. --auth alice:s3cret")
    return user, password


def check_ui_exposure(host: str, share: bool, auth: str | None) -> None:
    """The UI starts training on any model path and previews local files: beyond this machine it needs a login."""
    if share and not auth:
        raise UserError("--share publishes the UI on the internet; add --auth USER:PASS (or drop --share)")
    check_exposure(host, bool(auth), "the UI", "--auth USER:PASS")


def launch_kwargs(host: str, port: int, share: bool, auth: str | None, runs_dir: Path) -> dict:
    """Everything passed to Blocks.launch (separate so tests can check the safe defaults)."""
    check_ui_exposure(host, share, auth)
    runs_dir = Path(runs_dir).resolve()
    return dict(
        server_name=host, server_port=port, share=bool(share), auth=parse_auth(auth),
        allowed_paths=[str(runs_dir), str(runs_dir / UPLOAD_DIR)], max_file_size=MAX_UPLOAD,
        show_error=True, enable_monitoring=False, mcp_server=False, run_history=False, ssr_mode=False,
        # quiet: Gradio's own banner suggests `share=True in launch()`, a Python call our users never make;
        # launch() prints where the UI is and how to share it (--share --auth) instead
        footer_links=[], quiet=True, css=CSS,
    )


def launch(host: str = "127.0.0.1", port: int = 7860, share: bool = False, auth: str | None = None,
           runs_dir: Path = Path("runs"), local_only: bool = False, block: bool = True, open_browser: bool = False):
    """Build and serve the app; say where it is (and open a browser there with ``open_browser``). With block=False
    returns the running Blocks (tests; call .close() and .jobs.shutdown())."""
    kwargs = launch_kwargs(host, port, share, auth, runs_dir)
    check_port(host, port, 7860)  # before the app is built: Gradio's own error is a long traceback
    demo = build_app(runs_dir, local_only=local_only)
    atexit.register(demo.jobs.shutdown)  # a UI closed with Ctrl-C still stops its run gracefully
    demo.queue(default_concurrency_limit=4)
    demo.launch(prevent_thread_lock=True, **kwargs)  # returns once it serves: the address is said before blocking
    print(serving_message(demo, host, share, auth), flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(getattr(demo, "local_url", None) or f"http://{host}:{port}/")
    if block:
        demo.block_thread()  # until Ctrl-C; atexit then stops a running training gracefully
    return demo


def serving_message(demo, host: str, share: bool, auth: str | None) -> str:
    where = f"qlora-app UI on {getattr(demo, 'local_url', None) or f'http://{host}'}"
    if share:
        return f"{where} and {getattr(demo, 'share_url', None) or 'a public share link'} (login required)"
    if is_loopback(host):
        return f"{where} (this machine only" + ("; login required)" if auth else
                                                "; qlora-app ui --share --auth USER:PASS publishes it, with a login)")
    return f"{where} (login required)"
