"""What the Train and Runs tabs show of a run, as plain functions (no Gradio imports): its status line, the runs
table, the curves figure (app/run/curves.py, the one curves.png is drawn from), the log tail, and the fingerprint that
tells a view when to refresh."""

from __future__ import annotations

import html
import re
from pathlib import Path

from app.host.procs import pid_alive
from app.run import layout, lookup, store
from app.run.curves import figure, stopped_at, waiting
from app.run.summary import run_summary
from app.ui.folders import shown_runs
from app.ui.jobs import console_tail, running_elsewhere

LOG_TAIL_BYTES = 64 * 1024


# notes: each tool's and the judge's calls and failures, and the kinds the run's diagnosis said (a run whose every
# judgement failed must not look healthy here); one column, so the table still fits a 1400 px page
RUN_COLUMNS = ["run", "status", "method", "model", "dataset", "step", "loss", "reward", "pref. acc.", "notes", "date"]


def runs_rows(runs_dir: str | Path) -> list[list]:
    rows = []
    for label, d in shown_runs(runs_dir):
        s = run_summary(d)
        step = f"{s['step']}/{s['max_steps']}" if s.get("max_steps") else (s.get("step") or "")
        rows.append([label, s["status"], s["method"] or "", _short_source(s["model"]),
                     _short_source(s["dataset"]), str(step),
                     "" if s["loss"] is None else s["loss"], "" if s["reward"] is None else s["reward"],
                     s["pref_accuracy"] or "", " · ".join(x for x in (s["calls"], s["notes"]) if x), s["date"]])
    return rows


def _short_source(name: str | None) -> str:
    """A local path as its last part (the table must fit a 1400 px page; the run view has the whole path); a hub
    id whole."""
    if not name:
        return ""
    return Path(name).name if name.startswith(("/", ".", "~")) or "\\" in name else name


def curves(run_dir: Path | None, records: list[dict] | None = None, max_steps: int | None = None):
    """The run's curves: the figure its curves.png is drawn from (app/run/curves.py), or None before a logged step.
    ``records``: metrics.jsonl rows already read; ``max_steps``: the run's end, so the shared step axis shows
    how far it has come."""
    if run_dir is None:
        return None
    recs = store.read_metrics(run_dir) if records is None else records
    return figure(recs, Path(run_dir).name, max_steps, stopped_at(store.read_status(run_dir) or {})) or waiting()


def curves_key(run_dir: Path | None, records: list[dict], summary: dict | None) -> tuple:
    """What the curves depend on: a view redraws (a PNG, ~0.2 s on a CPU) only when this changes."""
    last = records[-1] if records else {}
    return (str(run_dir), len(records), last.get("step"), (summary or {}).get("max_steps"))


def runs_fingerprint(runs_dir: str | Path) -> tuple:
    """Changes whenever anything a Runs view shows may have: a run's status.json or metrics.jsonl written, its proof
    or an evaluation (`qlora-app eval`) added, a run made or removed, a "running" process gone (kill -9 writes
    nothing). A few stat calls per run."""
    out = []
    for label, d in shown_runs(runs_dir):
        row: list = [label]
        for name in (layout.STATUS, layout.METRICS, layout.COMPARE_JSON, layout.EVALS):
            try:
                st = (d / name).stat()
                row += [st.st_mtime_ns, st.st_size]
            except OSError:
                row += [None, None]
        if row[1] is not None:
            st = store.read_status(d) or {}
            row.append(st.get("status") == layout.RUNNING and pid_alive(st.get("pid")))
        out.append(tuple(row))
    return tuple(out)


def log_tail(run_dir: Path | None, lines: int = 80) -> str:
    if run_dir is None:
        return ""
    p = Path(run_dir) / layout.LOG
    try:
        with open(p, "rb") as f:
            f.seek(max(0, p.stat().st_size - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    # A progress bar redraws one line with carriage returns; show only its latest state.
    shown = [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in text.rstrip("\n").split("\n")]
    return "\n".join(shown[-lines:])


def status_markdown(s: dict) -> str:
    head = f"**{s['name']}** — status **{s['status']}**"
    if s.get("max_steps"):
        head += f" — step {s.get('step') or 0} / {s['max_steps']}"
    parts = [head]
    if s.get("error"):
        parts.append(f"<span style='color:#b3261e'>**error:** {s['error']}</span>")
    if s.get("peak_memory"):
        parts.append(f"peak memory: {s['peak_memory']}")
    if s.get("fast_paths"):
        parts.append(f"fast paths: {s['fast_paths']}")
    parts += [f"adjusted {line}" for line in s.get("adjustments") or []]
    if s.get("adapter"):
        parts.append(f"adapter: `{s['adapter']}`")
    if s.get("tools"):  # a tool run: its calls per tool, live (status.json's counts)
        parts.append(f"tool calls: {s['tools']}")
    if s.get("judgements"):
        parts.append(f"judge: {s['judgements']}")
    for line in s.get("diagnosis") or []:  # what the run's diagnosis found: in view beside the curves it reads
        text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(line))  # markdown is not read inside HTML
        parts.append(f"<div class='diagnosis' style='border-left:4px solid #b06000;background:#fff4e5;"
                     f"padding:4px 8px;margin:4px 0'><b>what the run's curves say:</b> {text}</div>")
    if s.get("heldout"):
        parts.append(f"held-out during training: {s['heldout']}")
    if s.get("early_stop"):  # training.early_stop: where it stopped, which adapter is the run's
        parts.append(f"early stopping: {s['early_stop']}")
    if s.get("comparison"):
        parts.append(f"held-out comparison: {s['comparison']}")
    if s.get("general_ability"):  # the newest `qlora-app eval` (lm-evaluation-harness), base vs adapter
        parts.append(f"general ability: {html.escape(s['general_ability'])}")
    if s.get("resume_command"):
        parts.append(f"stopped with a checkpoint: resume it from the Runs tab, or `{s['resume_command']}`")
    elif s["status"] == layout.CRASHED:
        parts.append("the training process is gone and left no complete checkpoint: start the run again")
    out = ""
    for part in parts:  # an HTML block runs to the next blank line: blank lines around it, or what follows joins it
        if part.startswith("<div"):
            out += f"\n\n{part}\n\n"
        else:
            out += ("" if not out or out.endswith("\n\n") else "  \n") + part
    return out.strip()


def progress_html(s: dict | None) -> str:
    if not s or not s.get("max_steps"):
        return ""
    step, total = s.get("step") or 0, s["max_steps"]
    pct = int(100 * step / max(total, 1))
    return (f"<div><progress value='{step}' max='{total}' style='width:100%'></progress>"
            f"<div style='font-size:0.9em'>{step} / {total} steps ({pct}%)</div></div>")


def live_status(jobs, runs_dir: str | Path) -> dict:
    """What the Train tab shows on each timer tick: the run started here, else one running elsewhere. A run whose
    session has not made its folder yet (it checks and plans first) shows its console; one refused before that
    shows why."""
    d = jobs.run_dir or running_elsewhere(Path(runs_dir))
    if d is not None and d == jobs.run_dir and jobs.error and not lookup.is_run_dir(Path(d)):
        # a refused Start stands until a run is made after it (from the CLI, another UI): then that run is news
        later = [r for r in lookup.list_runs(Path(runs_dir)) if lookup.created(r) > jobs.error_at]
        d = later[0] if later else d
    if d is None:
        return _no_run("No run started yet.")
    if not lookup.is_run_dir(Path(d)):
        console = console_tail(jobs.console) if d == jobs.run_dir else ""
        if d == jobs.run_dir and jobs.error:
            return _no_run(f"**{Path(d).name}** did not start  \n<span style='color:#b3261e'>**error:** "
                           f"{jobs.error}</span>", console)
        if d == jobs.run_dir and jobs.is_running():
            return _no_run(f"**{Path(d).name}** — checking the data and planning the run…", console)
        return _no_run("No run started yet.", console)
    recs = store.read_metrics(Path(d))  # once per tick: the summary and the curves both use these rows
    s = run_summary(Path(d), recs)
    if recs and s["status"] == layout.RUNNING:  # status.json is written every few steps; metrics every step
        s["step"] = max(s.get("step") or 0, recs[-1].get("step") or 0)
    return {"run_dir": Path(d), "status": s["status"], "summary": s, "markdown": status_markdown(s),
            "progress": progress_html(s), "log": log_tail(Path(d)), "records": recs,
            "curves_key": curves_key(Path(d), recs, s)}


def _no_run(markdown: str, log: str = "") -> dict:
    return {"run_dir": None, "status": None, "summary": None, "markdown": markdown, "progress": "", "log": log,
            "records": [], "curves_key": curves_key(None, [], None)}
