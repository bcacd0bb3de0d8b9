"""train.log: the engine's log file, and the libraries' loggers routed into it (one line per record)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from app.run import layout

_captured_before = False  # whether Python warnings were kept off the terminal before the run (close restores it)
LOGGERS = ("qlora_app", "transformers", "trl", "peft", "py.warnings", "app")


class _RunLog(logging.FileHandler):
    """train.log. A line that cannot be written (a full disk) is dropped quietly: the run's own error path says
    what happened in one line, where logging's default would print a traceback per lost line."""

    def handleError(self, record) -> None:
        pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            pass


class _NotTwice(logging.Filter):
    """The UI starts the engine with its console (stdout, stderr) appended to train.log. A record that another
    handler already prints to that console (transformers' own stderr handler, a user's) is then in the file once;
    this handler would write it a second time. Checked when a record is written, so a library imported after
    this handler was set up is covered too."""

    def __init__(self, log_path: Path):
        super().__init__()
        st = os.stat(log_path)
        self.log_file = (st.st_dev, st.st_ino)

    def _writes_log(self, h: logging.Handler) -> bool:
        stream = getattr(h, "stream", None)
        if isinstance(h, logging.FileHandler) or stream is None:
            return False
        try:
            st = os.fstat(stream.fileno())
        except (OSError, ValueError, AttributeError):  # a closed or in-memory stream
            return False
        return (st.st_dev, st.st_ino) == self.log_file

    def filter(self, record: logging.LogRecord) -> bool:
        lg: logging.Logger | None = logging.getLogger(record.name)
        while lg is not None:
            if any(self._writes_log(h) and record.levelno >= h.level for h in lg.handlers):
                return False
            lg = lg.parent if lg.propagate else None
        return True


def setup_logging(run_dir: Path) -> logging.Handler:
    handler = _RunLog(Path(run_dir) / layout.LOG)
    handler.addFilter(_NotTwice(Path(run_dir) / layout.LOG))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    for name in LOGGERS:
        lg = logging.getLogger(name)
        lg.addHandler(handler)
    # Our own messages at INFO; the libraries' INFO (every config file they read) would drown the log and,
    # through their own stderr handlers, the terminal.
    logging.getLogger("qlora_app").setLevel(logging.INFO)
    # Python warnings into train.log. Turned off and on again: logging's switch remembers an earlier run in this
    # process (the demo, the UI's in-process paths) as "already on" even when something since (a
    # warnings.catch_warnings block, a test runner) put the original showwarning back; then nothing would be captured.
    global _captured_before
    _captured_before = bool(logging.getLogger("py.warnings").handlers) and not logging.getLogger(
        "py.warnings").propagate  # a command line that keeps Python warnings off the terminal
    logging.captureWarnings(False)
    logging.captureWarnings(True)
    return handler


def close_logging(handler: logging.Handler | None) -> None:
    if handler is not None:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
        handler.close()
        # the pair of setup_logging's: warnings go back where they went before the run (stderr, or nowhere in a
        # qlora-app command: app.host.process.quiet_command_line)
        logging.captureWarnings(_captured_before)
