"""`qlora-app score`: score completions with the shaped reward and explain every component.

    qlora-app score --completion "48 + 24 = 72. Final answer: 72" --reference "#### 72"
    qlora-app score --file rows.jsonl --json          # rows {"completion": ..., "reference": ...}
    qlora-app score --completion "..." --reward my_rewards.py:brevity   # a custom reward beside the shaped one

``--json`` prints one line per input, in order: {"total": float, "components": {...}} -- the same numbers GRPO
training optimises (``score_completion``). Without it, a table per input: value, weight, contribution and why.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.config.build import build_config
from app.errors import UserError
from app.rewards import explain_completion, load_custom


def _read_rows(file: str) -> list[tuple[object, str | None]]:
    p = Path(file).expanduser()
    if not p.is_file():
        raise UserError(f"--file '{p}' not found; pass a JSONL file with rows {{\"completion\", \"reference\"}}")
    rows = []
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"--file '{p}' is not UTF-8 text; save it as UTF-8 JSONL") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{p} line {i}: not valid JSON ({e.msg}); each line must be one JSON object") from None
        if not isinstance(row, dict) or "completion" not in row:
            raise UserError(f"{p} line {i}: needs a \"completion\" key, e.g. "
                            "{\"completion\": \"Final answer: 42\", \"reference\": \"42\"}")
        comp, ref = row["completion"], row.get("reference")
        if not isinstance(comp, (str, list)) or comp is None:
            raise UserError(f"{p} line {i}: \"completion\" must be a string or a chat list of messages")
        if ref is not None and not isinstance(ref, (str, int, float)):
            raise UserError(f"{p} line {i}: \"reference\" must be a string, a number or null")
        rows.append((comp, None if ref is None else str(ref)))
    if not rows:
        raise UserError(f"--file '{p}' has no rows; add lines like {{\"completion\": \"Final answer: 42\"}}")
    return rows


def run_score(completion: str | None, reference: str | None, file: str | None, as_json: bool,
              sets: list[str], rewards: list[str] = ()) -> int:
    """``rewards``: extra reward functions ('module:function' / 'file.py:function'), as `train --reward` adds."""
    if file and completion is not None:
        raise UserError("pass either --completion or --file, not both")
    if not file and completion is None:
        raise UserError("nothing to score; pass --completion TEXT [--reference REF] or --file rows.jsonl")
    if file and reference is not None:
        raise UserError("--reference goes with --completion; with --file put \"reference\" in each row")
    cfg = build_config({"reward": {"custom": list(rewards)}} if rewards else {}, sets=sets).reward
    for entry in cfg.custom:  # one line for a function that cannot be loaded, before anything is scored
        load_custom(entry)
    rows = _read_rows(file) if file else [(completion, reference)]

    if as_json:
        for comp, ref in rows:
            parts = explain_completion(comp, ref, cfg)
            out = {"total": float(sum(p["weighted"] for p in parts)),
                   "components": {p["name"]: 0.0 if p["value"] is None else float(p["value"]) for p in parts}}
            print(json.dumps(out), flush=True)
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console()
    for n, (comp, ref) in enumerate(rows, 1):
        parts = explain_completion(comp, ref, cfg)
        total = sum(p["weighted"] for p in parts)
        title = f"[bold]{'input ' + str(n) + ': ' if len(rows) > 1 else ''}reward {total:.3f}[/]"
        table = Table(title=title, title_justify="left")
        table.add_column("component")
        table.add_column("value", justify="right")
        table.add_column("weight", justify="right")
        table.add_column("contribution", justify="right")
        table.add_column("why", overflow="fold")
        for p in parts:
            val = "n/a" if p["value"] is None else f"{p['value']:.3f}"
            style = "green" if p["weighted"] > 0 else "red" if p["weighted"] < 0 else ""
            table.add_row(p["name"], val, f"{p['weight']:g}", f"[{style}]{p['weighted']:+.3f}[/]" if style
                          else f"{p['weighted']:+.3f}", p["why"])
        console.print(table)
        if ref is None:
            console.print("[dim]no reference: the reference component does not apply (counts 0)[/]")
    return 0
