"""What the tabs share: the one-line error, the curves view, tooltips."""

import logging
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

from app.config.flags import FLAGS
from app.config.help import key_help
from app.errors import UserError

log = logging.getLogger("qlora_app.ui")


@dataclass
class Context:
    """What every tab builder needs."""

    runs_dir: Path
    jobs: object  # app.ui.jobs.JobManager
    local_only: bool


# The engine's messages name CLI flags; on the page they name the control that sets the same thing (the one table).
UI_CONTROLS = {f.cli: f.label for f in FLAGS if f.cli and f.label} | {
    # the Compare and Chat tabs' own controls (compare / chat flags)
    "--max-new-tokens": "Max new tokens", "--num-samples": "Held-out rows to sample", "--temperature": "Temperature",
    "--prompt": "Prompt"}
_FLAG = re.compile(r"(?<![\w-])(" + "|".join(re.escape(f) for f in UI_CONTROLS) + r")(?![\w-])(?: (NAME|FILE|ID|[^\s;,)']+))?")


def _control(m: re.Match) -> str:
    label, value = UI_CONTROLS[m.group(1)], m.group(2)
    return f"'{label}'" if value in (None, "NAME", "FILE", "ID") else f"'{label}' = {value}"


def in_ui_words(text: str) -> str:
    """'pass --reference-field NAME' -> "pass 'Reference field (override)'", '--model arith-base' -> "'Model' =
    arith-base": what to touch on this page. A quoted command ('qlora-app prefetch --model X') stays a command."""
    parts = re.split(r"('[^']*')", text)
    return "".join(p if p.startswith("'") else _FLAG.sub(_control, p) for p in parts)


def err(e: BaseException) -> str:
    """A failure as one red line on the page (the UserError text, or type and message for a bug): never hidden."""
    if isinstance(e, UserError):
        return f"<span style='color:#b3261e'>error: {in_ui_words(str(e))}</span>"
    log.error("UI handler failed:\n%s", traceback.format_exc())
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return f"<span style='color:#b3261e'>error: {type(e).__name__}: {first}</span>"


def plots(ids: str):
    """The run's curves: the very figure its curves.png is drawn from (app/run/curves.py), as a PNG."""
    import gradio as gr

    return gr.Plot(label="training curves", format="png", elem_id=f"{ids}-curves", show_label=False)


def config_help(dotted: str) -> str | None:
    """The config field's description: the same text `qlora-app train --dry-run --explain` prints."""
    return key_help().get(dotted) or None
