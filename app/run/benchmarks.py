"""A run's general-ability evaluations on disk: what `qlora-app eval` measured with lm-evaluation-harness.

    RUN/evals/eval-<time>.json           tasks, settings, the base/adapter table, the harness's results per side
    RUN/evals/eval-<time>.samples.jsonl  one line per evaluated row: the prompt, the target, both sides' answers

Each evaluation is a file of its own, never over another; readers show the newest (`runs show`, `runs list --json`,
the UI's run view, the model card's "General ability: base vs adapter"). The figures are written in one place
(``cell``/``change``) for every view.

Owns: the evals folder's files and how their figures read. Must not run the harness (app/eval/harness.py does).
Standard library only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.run.layout import EVALS
from app.run.store import stamped, write_atomic

PROMPT_CHARS = 2000  # a sample's prompt as kept (few-shot prompts run long; the harness's own log keeps all)


def write_eval(run_dir: Path, data: dict) -> Path:
    """RUN/evals/eval-<time>.json (+ .samples.jsonl from ``data['samples']``, paired base/adapter per row)."""
    data = dict(data)
    samples = data.pop("samples", None) or {}
    path = stamped(Path(run_dir) / EVALS, "eval", time.time())
    lines = [json.dumps(s, ensure_ascii=False, default=str) for s in paired_samples(samples)]
    if lines:
        side = path.with_suffix(".samples.jsonl")
        write_atomic(side, "\n".join(lines) + "\n")
        data["samples_file"] = side.name
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, default=str))
    return path


def paired_samples(samples: dict) -> list[dict]:
    """{side: {task: [harness sample]}} -> one row per (task, doc): prompt, target, each side's answer and scores."""
    out = []
    base, adapter = samples.get("base") or {}, samples.get("adapter") or {}
    for task, rows in base.items():
        theirs = {(r.get("doc_id"), r.get("filter")): r for r in adapter.get(task, [])}
        for r in rows:
            a = theirs.get((r.get("doc_id"), r.get("filter")), {})
            args = r.get("arguments") or []
            first = args[0] if args and isinstance(args[0], (list, tuple)) else args
            prompt = first[0] if first and isinstance(first[0], str) else None
            out.append({"task": task, "doc_id": r.get("doc_id"), "filter": r.get("filter"),
                        "prompt": prompt[-PROMPT_CHARS:] if prompt else None, "target": r.get("target"),
                        "base": _answer(r), "adapter": _answer(a),
                        "base_scores": _scores(r), "adapter_scores": _scores(a)})
    return out


def _answer(sample: dict):
    resp = sample.get("filtered_resps")
    return resp[0] if isinstance(resp, list) and len(resp) == 1 else resp


def _scores(sample: dict) -> dict:
    return {k: sample[k] for k in (sample.get("metrics") or []) if k in sample}


def evals(run_dir: Path) -> list[Path]:
    """The run's evaluations, newest first."""
    folder = Path(run_dir) / EVALS
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("eval-*.json")), key=lambda p: p.stat().st_mtime, reverse=True)


def latest_eval(run_dir: Path) -> dict | None:
    for path in evals(run_dir):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file someone cut short: the next newest
    return None


def cell(row: dict, side: str) -> str:
    """'52.0%' for a share of rows (accuracy, exact match), '3.418' otherwise."""
    v = row[side]
    return f"{v:.1%}" if row.get("share") else f"{v:.4g}"


def change(row: dict) -> str:
    """'+31.0 pts (better)', '-0.8 pts (within noise)', '+0.12 (worse)' for a metric where lower is better."""
    d = row["delta"]
    amount = f"{d * 100:+.1f} pts" if row.get("share") else f"{d:+.3g}"
    return f"{amount} ({row['change']})"


def label(row: dict) -> str:
    return f"{row['task']} {row['metric']}" + (f" [{row['filter']}]" if row.get("filter") not in (None, "none") else "")


def eval_text(ev: dict | None) -> str | None:
    """'qlora_arith exact_match [last-number] base 21.0% -> adapter 52.0% (+31.0 pts (better)), 100 rows; ...'"""
    if not ev or not ev.get("table"):
        return None
    parts = []
    for row in ev["table"]:
        n = f", {row['n']} rows" if row.get("n") else ""
        parts.append(f"{label(row)} base {cell(row, 'base')} -> adapter {cell(row, 'adapter')}, {change(row)}{n}")
    return "; ".join(parts + leak_words(ev))


def leak_words(ev: dict) -> list[str]:
    """'qlora_arith: 12 of 200 rows repeat a training prompt (3 exactly, 9 nearly) and are left out; e.g. ...': an
    evaluation's leaked rows per task (none: [])."""
    out = []
    for name, leak in (ev.get("leaks") or {}).items():
        if leak.get("leaked"):
            eg = f"; e.g. {leak['examples'][0][0][:80]!r}" if leak.get("examples") else ""
            out.append(f"{name}: {leak['leaked']} of {leak['rows']} rows repeat a training prompt ({leak['exact']} "
                       f"exactly once normalised, {leak['near']} nearly) and are left out{eg}")
    return out


def eval_table(ev: dict | None) -> list[str]:
    """The card's section body: a markdown table of the newest evaluation, with how it was run."""
    if not ev or not ev.get("table"):
        return ["Not measured: `qlora-app eval RUN --tasks ...` runs lm-evaluation-harness on base and adapter."]
    lines = ["| task | metric | rows | base | adapter | change |", "|---|---|---:|---:|---:|---|"]
    for row in ev["table"]:
        metric = row["metric"] + (f" ({row['filter']})" if row.get("filter") not in (None, "none") else "")
        lines.append(f"| {row['task']} | {metric} | {row.get('n') or ''} | {cell(row, 'base')} | "
                     f"{cell(row, 'adapter')} | {change(row)} |")
    how = (f"EleutherAI lm-evaluation-harness {ev.get('lm_eval_version')}, {ev.get('date')}; the base in 4-bit "
           f"with the adapter off and on; {'the chat template' if ev.get('chat_template') else 'plain prompts'}"
           + (f", {ev['num_fewshot']}-shot" if ev.get("num_fewshot") is not None else "")
           + (f", limit {ev['limit']:g} rows per task" if ev.get("limit") else "")
           + "; 'within noise': the change is no more than twice the two sides' combined standard error.")
    return lines + ["", how] + [f"- {line}" for line in leak_words(ev)]
