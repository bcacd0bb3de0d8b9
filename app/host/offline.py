"""What the process environment tells the libraries before they load: stay off the network (--local-only) and keep
quiet about what a user cannot act on.

Owns: the offline flags (OFFLINE_ENV), reading HF_HUB_OFFLINE, and the libraries' noise settings. Must not import
anything but the standard library: the CLI calls ``apply_local_only`` before huggingface_hub, transformers or
datasets are imported (they read these flags at import time).
"""

from __future__ import annotations

import logging
import os
import warnings

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


def hub_offline() -> bool:
    """Whether the hub is off limits for this process (HF_HUB_OFFLINE, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


# Library lines a user cannot act on: bitsandbytes' optional hub 'kernels' package, and transformers' note that a
# resumed run's batch differs from its checkpoint's (qlora-app says that change itself: a resume's --set, or the
# out-of-memory ladder).
NOT_ACTIONABLE = ("kernels", "do not match the ones in the `trainer_state.json`")


def quiet_library_noise() -> None:
    """Keep the terminal readable: our own progress bars replace the libraries' (loading shards, generating
    splits), and bitsandbytes' warning that an optional hub 'kernels' package is absent is not actionable (its
    fallback CPU kernel is what we want offline). Must run before those libraries are imported."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not any(n in record.getMessage() for n in NOT_ACTIONABLE)

    for name in ("bitsandbytes", "bitsandbytes.backends.cpu.ops", "transformers.trainer_utils", ""):
        logging.getLogger(name).addFilter(_Drop())
    # datasets logs its own line for a file it cannot parse, before our one-line error says which line and why.
    logging.getLogger("datasets.packaged_modules.json.json").setLevel(logging.CRITICAL)
    # The libraries' deprecation notices (transformers' is_gradient_checkpointing, TRL's use of renamed arguments)
    # are addressed to their callers' authors, not to someone running `qlora-app compare`; they broke the progress
    # bar and read like errors. Our own code raises neither category.
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)


def quiet_command_line() -> None:
    """For a `qlora-app` command (not a library user's process): the libraries' own warnings never reach the
    terminal, whatever the device adds to them (CUDA-side libraries warn more than CPU ones). transformers logs
    errors only; Python warnings go to logging, where a run's train.log keeps them (app/train/runlog.py) and
    nothing else prints them. Must run before transformers is imported (it reads its verbosity then)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.captureWarnings(True)
    caught = logging.getLogger("py.warnings")
    caught.propagate = False
    if not caught.handlers:
        caught.addHandler(logging.NullHandler())
