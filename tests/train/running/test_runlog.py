"""train.log gets each record once, also when the engine's console is train.log itself (the UI's runs)."""

import logging
import warnings

import pytest

from app.run import layout
from app.train.running.runlog import close_logging, setup_logging


@pytest.fixture(autouse=True)
def _library_warnings_on():
    """transformers at its default level (warnings), whatever an earlier in-process command set: `qlora-app` sets
    TRANSFORMERS_VERBOSITY=error, and a worker that imported transformers after an in-process CLI test logs errors
    only, so these tests' library warning would never be made."""
    lib = logging.getLogger("transformers")
    level = lib.level
    lib.setLevel(logging.WARNING)
    yield
    lib.setLevel(level)


def _lines(d, text):
    return [ln for ln in (d / layout.LOG).read_text().splitlines() if text in ln]


def test_a_library_warning_is_written_once_when_the_console_is_train_log(tmp_path):
    (tmp_path / layout.LOG).touch()
    console = open(tmp_path / layout.LOG, "a", buffering=1)  # what the UI does: stdout/stderr appended to train.log
    lib = logging.getLogger("transformers")
    own = logging.StreamHandler(console)  # transformers' default stderr handler, here writing into train.log
    lib.addHandler(own)
    handler = setup_logging(tmp_path)  # set up before the library's handler is used: checked per record
    try:
        logging.getLogger("transformers.modeling_utils").warning("a library warning")
        logging.getLogger("qlora_app").info("our own line")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a python warning", UserWarning, stacklevel=1)
    finally:
        close_logging(handler)
        lib.removeHandler(own)
        console.close()
        logging.captureWarnings(False)
    assert len(_lines(tmp_path, "a library warning")) == 1
    assert len(_lines(tmp_path, "our own line")) == 1 and "INFO qlora_app" in _lines(tmp_path, "our own line")[0]
    assert len(_lines(tmp_path, "UserWarning: a python warning")) == 1


def test_python_warnings_reach_train_log_after_an_earlier_run_in_the_same_process(tmp_path, monkeypatch):
    # An earlier run left logging's capture switch on, and something since put the original showwarning back (what
    # a warnings.catch_warnings block or pytest does): the next run's warnings must still be written.
    # A library user's process: warnings are not kept off the terminal (an in-process CLI test before this one set
    # up a command line's py.warnings logger, app.host.process.quiet_command_line)
    caught = logging.getLogger("py.warnings")
    monkeypatch.setattr(caught, "handlers", [])
    monkeypatch.setattr(caught, "propagate", True)
    logging.captureWarnings(True)
    warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
    handler = setup_logging(tmp_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("warned in the second run", UserWarning, stacklevel=1)
    finally:
        close_logging(handler)
    assert len(_lines(tmp_path, "UserWarning: warned in the second run")) == 1
    assert warnings.showwarning is warnings._showwarning_orig  # type: ignore[attr-defined]  # closed: back to stderr


def test_a_terminal_console_still_gets_its_copy_and_the_file_its_own(tmp_path):
    other = open(tmp_path / "terminal.txt", "w", buffering=1)  # a console that is not train.log
    lib = logging.getLogger("transformers")
    own = logging.StreamHandler(other)
    lib.addHandler(own)
    handler = setup_logging(tmp_path)
    try:
        logging.getLogger("transformers.modeling_utils").warning("seen on the terminal and in the file")
    finally:
        close_logging(handler)
        lib.removeHandler(own)
        other.close()
        logging.captureWarnings(False)
    assert len(_lines(tmp_path, "seen on the terminal")) == 1
    assert "seen on the terminal" in (tmp_path / "terminal.txt").read_text()
