"""What the CLI prints about a run: its plan (`train --dry-run`) and its outcome (end of `train`, `runs show`).
rich only at module level: the CLI loads this for ``--help``."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.table import Table

from app import rundir
from app.config import resolve, warnings_for
from app.config_keys import explain_rows
from app.config_schema import AppConfig
from app.data import build_splits
from app.errors import UserError
from app.plots import curve_keys, series, sparkline
from app.runs import run_summary
from app.train.plan import make_plan


def print_plan(cfg: AppConfig, explain: str | None, console, err_console) -> None:
    """The config that would train, as the run plan fits it (stdout: YAML, or the --explain table of the keys that
    contain ``explain``; "" = all), and the plan itself on stderr: the detected fields, memory estimate, fast paths,
    what it adjusted and why. The data's token lengths are used when the dataset is local or built in; nothing is
    downloaded and no weights are loaded."""
    rows = det = None
    try:
        rows, _, det = build_splits(cfg.data, cfg.training.seed, local_only=True)
    except Exception:  # noqa: BLE001 - a hub dataset not in the cache, or no dataset yet: plan without it
        pass
    notes: list[str] = []
    try:
        plan = make_plan(cfg, rows, det, note=notes.append, offline=True)
    except UserError as e:
        plan, refused = None, str(e)
    shown = plan.cfg if plan is not None else resolve(cfg)
    if explain is not None:
        _print_explained(shown, console, explain)
    else:
        sys.stdout.write(plan.config_yaml() if plan is not None else shown.to_yaml())
    if det is not None:  # what `prompt_field: null` (auto) resolves to on this data
        err_console.print(f"fields: {det.fields_line()}", highlight=False)
    # a note that became an adjustment is shown once, as the adjustment (plan.describe)
    reasons = " ".join(a.reason for a in plan.adjustments) if plan is not None else ""
    for w in warnings_for(shown) + [n for n in notes if n not in reasons]:
        err_console.print(f"[yellow]note:[/] {w}", highlight=False)
    if plan is None:
        err_console.print(f"[red]would be refused:[/] {refused}", highlight=False)
    else:
        err_console.print(plan.describe(), highlight=False)


def _print_explained(cfg: AppConfig, console, only: str = "") -> None:
    rows = [r for r in explain_rows(cfg) if only.lower() in r[0].lower()]
    if not rows:
        raise UserError(f"--explain {only} matches no config key; try a section (model, lora, data, training, grpo, "
                        "reward, runtime) or part of a key")
    t = Table(title="resolved config (--set KEY=VALUE changes any key)", show_lines=False)
    t.add_column("key", no_wrap=True, style="bold")
    t.add_column("value", overflow="fold", max_width=40)
    t.add_column("what it does", overflow="fold", ratio=1)
    for key, value, text in rows:
        t.add_row(key, value, text)
    console.print(t)


def print_run_summary(d: Path, console) -> None:
    recs = rundir.read_metrics(d)  # once: the summary and the curves both use these rows
    st = run_summary(d, recs)
    t = Table(title=f"run {d.name}: {st['status']}", show_header=True)
    t.add_column("metric")
    t.add_column("last", justify="right")
    t.add_column("curve")
    for k in curve_keys(recs):
        _, ys = series(recs, k)
        t.add_row(k, f"{ys[-1]:.4g}", sparkline(ys, 32))
    t.add_row("steps", str(st.get("step")), "")
    if st.get("peak_memory"):
        est = st.get("memory_estimate_gb")
        t.add_row("peak memory", st["peak_memory"] + (f" (estimate for a GPU: {est:.1f} GB)" if est else ""), "")
    if st.get("fast_paths"):
        t.add_row("fast paths", st["fast_paths"], "")
    for line in st.get("adjustments") or []:
        t.add_row("adjusted", line, "")
    if st.get("heldout"):
        t.add_row("held-out during training", st["heldout"], "")
    if st.get("comparison"):
        t.add_row("held-out", st["comparison"], "")
    if st.get("error"):
        t.add_row("error", st["error"], "")
    console.print(t)
    if st.get("adapter"):  # on its own line: the path to copy, never cut by the table's width
        console.print("adapter:", highlight=False)
        console.print(st["adapter"], highlight=False, soft_wrap=True)
    if st.get("resume_command"):
        console.print(f"continue it with: {st['resume_command']}", highlight=False, soft_wrap=True)
