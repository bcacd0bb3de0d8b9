"""What the three tabs share: the one-line error, curve frames with fixed dtypes, the plot row, tooltips."""

import logging
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

from app.config_keys import field_help
from app.errors import UserError
from app.reward_registry import COMPONENTS

log = logging.getLogger("qlora_app.ui")
PLOT_COLUMNS = ["step", "value", "series"]
# Gradio's LinePlot fixes its colour domain from the first value it renders, so the component plot starts with
# one empty (NaN) point per registry component, coloured as in the registry; a series missing from it would be
# drawn without a colour (custom reward functions therefore show in the Runs tab's curves.png only).
COMPONENT_SEED = [{"step": 1, "value": float("nan"), "series": c.name} for c in COMPONENTS]
COMPONENT_COLOURS = {c.name: c.colour for c in COMPONENTS}


@dataclass
class Context:
    """What every tab builder needs."""

    runs_dir: Path
    jobs: object  # app.ui.jobs.JobManager
    local_only: bool


# The engine's messages name CLI flags; on the page they name the control that sets the same thing.
UI_CONTROLS = {"--prompt-field": "Prompt field (override)", "--reference-field": "Reference field (override)",
               "--dataset": "Dataset", "--model": "Model", "--max-steps": "Max steps",
               "--local-only": "Local only (offline)", "--num-processes": "Processes (GPUs)"}
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


def frame(records: list[dict]):
    """Long-format curve data with fixed dtypes: the plot takes its axis types from the dtypes, and an empty
    frame would otherwise be all-object (a discrete axis, no lines drawn)."""
    import pandas as pd

    df = pd.DataFrame(records, columns=PLOT_COLUMNS)
    return df.astype({"step": "int64", "value": "float64", "series": "string"})


def components_frame(records: list[dict]):
    return frame(COMPONENT_SEED + records)


def plots(ids: str):
    """loss, total reward and reward components side by side."""
    import gradio as gr

    with gr.Row():
        loss = gr.LinePlot(frame([]), x="step", y="value", title="loss", height=280, label="loss",
                           elem_id=f"{ids}-loss-plot")
        reward = gr.LinePlot(frame([]), x="step", y="value", title="reward (total)", height=280, label="reward",
                             elem_id=f"{ids}-reward-plot")
        comps = gr.LinePlot(components_frame([]), x="step", y="value", color="series", color_map=COMPONENT_COLOURS,
                            title="reward components", height=280, label="reward components",
                            elem_id=f"{ids}-comp-plot")
    return loss, reward, comps


def config_help(dotted: str) -> str | None:
    """The config field's description: the same text `qlora-app train --dry-run --explain` prints."""
    return field_help().get(dotted) or None
