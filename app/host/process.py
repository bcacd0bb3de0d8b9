"""What a qlora-app process sets for itself once, at its entry: how loud the libraries are, and how the C allocator
keeps freed memory.

Called by the entry points only (`qlora-app`'s ``main``, compare_base_vs_lora.py, the bench harnesses), before
transformers, datasets or bitsandbytes are imported: they read some of these settings at import. Library code never
calls it, so importing qlora-app from another program changes nothing of that program's warnings, logging or
environment. Each setting is made once per process, however often this is called.

Owns: every process-wide setting of that kind (tests/structure/test_architecture.py scans app/ for others). Must not
import anything but the standard library and app.host.
"""

from __future__ import annotations

import logging
import os
import warnings

from app.host.alloc import reuse_freed_memory

# Library lines a user cannot act on: bitsandbytes' optional hub 'kernels' package, and transformers' note that a
# resumed run's batch differs from its checkpoint's (qlora-app says that change itself: a resume's --set, or the
# out-of-memory ladder).
NOT_ACTIONABLE = ("kernels", "do not match the ones in the `trainer_state.json`")
# Where those lines come from (the root logger: bitsandbytes logs some through it).
NOT_ACTIONABLE_LOGGERS = ("bitsandbytes", "bitsandbytes.backends.cpu.ops", "transformers.trainer_utils", "")
# The libraries whose deprecation notices are addressed to their callers' authors, not to someone running a
# qlora-app command (transformers' is_gradient_checkpointing, TRL's use of renamed arguments): they broke the
# progress bar and read like errors. Matched against the module that warns; our own code's warnings stay.
QUIETED_LIBRARIES = r"(transformers|trl|peft|accelerate|datasets|bitsandbytes|torch|huggingface_hub)(\.|$)"

_done: set[str] = set()


class _DropNotActionable(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n in record.getMessage() for n in NOT_ACTIONABLE)


def quiet_library_noise() -> None:
    """Our progress bars replace the libraries' (loading shards, generating splits); lines a user cannot act on are
    dropped; the libraries' FutureWarning / DeprecationWarning are ignored (theirs only: ``QUIETED_LIBRARIES``)."""
    if "noise" in _done:
        return
    _done.add("noise")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    for name in NOT_ACTIONABLE_LOGGERS:
        logging.getLogger(name).addFilter(_DropNotActionable())
    # datasets logs its own line for a file it cannot parse, before our one-line error says which line and why.
    logging.getLogger("datasets.packaged_modules.json.json").setLevel(logging.CRITICAL)
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=QUIETED_LIBRARIES)


def quiet_command_line() -> None:
    """For a `qlora-app` command (not a library user's process): the libraries' own warnings never reach the
    terminal, whatever the device adds to them (CUDA-side libraries warn more than CPU ones). transformers logs
    errors only; Python warnings go to logging, where a run's train.log keeps them (app/train/running/runlog.py) and
    nothing else prints them."""
    if "command" in _done:
        return
    _done.add("command")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.captureWarnings(True)
    # lm-evaluation-harness's notes to its callers (an already-built model passed on purpose, where its own CLI
    # takes --metadata): `qlora-app eval` prints its own lines, the harness's errors still show.
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    caught = logging.getLogger("py.warnings")
    caught.propagate = False
    if not caught.handlers:
        caught.addHandler(logging.NullHandler())


def start_command() -> None:
    """Everything a `qlora-app` process sets for itself, before any command runs (app/cli/main.py's ``main``)."""
    quiet_library_noise()
    quiet_command_line()
    reuse_freed_memory()  # before the first tensors: see app/host/alloc.py
