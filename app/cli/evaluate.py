"""`qlora-app eval RUN --tasks ...`: lm-evaluation-harness on the run's base and adapter, side by side, kept in
RUN/evals/ (registered on the main Typer app by app.cli). Light imports only, as in app.cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.cli.options import switch
from app.errors import UserError
from app.eval.harness import parse_metadata, run_harness
from app.host.offline import apply_local_only
from app.host.threads import use_free_cores
from app.run import benchmarks, lookup

console = Console()


def eval_(
    run: Path = typer.Argument(..., help="Run directory (or bare run name) or adapter directory."),
    tasks: List[str] = typer.Option(..., "--tasks", help="Harness task(s), comma-separated or repeated: a name "
                                                        "(qlora_arith, qlora_gsm8k_file, any lm-eval task), a YAML "
                                                        "file or a folder of them."),
    limit: Optional[float] = typer.Option(None, help="Rows per task (N), or a share of them (0.1): for a quick look."),
    include_path: Optional[List[Path]] = typer.Option(None, "--include-path", help="A folder (or YAML file) of "
                                                                                    "harness tasks (repeatable)."),
    metadata: Optional[List[str]] = typer.Option(None, "--metadata", help="KEY=VALUE (repeatable) or a JSON object "
                                                                          "the tasks read: qlora_gsm8k_file's "
                                                                          "path=FILE."),
    num_fewshot: Optional[int] = typer.Option(None, "--num-fewshot", help="Examples in each prompt (default: each "
                                                                          "task's own)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Answer length of the "
                                                                                "generation tasks (default: each "
                                                                                "task's own)."),
    batch_size: int = typer.Option(16, "--batch-size"),
    chat_template: Optional[bool] = typer.Option(None, "--chat-template/--no-chat-template",
                                                 help="Ask through the chat template and the run's system prompt "
                                                      "(default: when the tokenizer has one, as training asked)."),
    model: Optional[str] = typer.Option(None, help="Base model, when the adapter does not say which."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the evaluation to this file."),
    local_only: bool = switch("--local-only"),
):
    """General ability, base vs adapter: EleutherAI's lm-evaluation-harness on both, the changes beside them."""
    apply_local_only(local_only)
    if limit is not None and limit <= 0:
        raise UserError("--limit must be > 0: a number of rows per task (100) or a share of them (0.1)")
    if batch_size < 1 or (num_fewshot is not None and num_fewshot < 0) or (max_new_tokens or 1) < 1:
        raise UserError("--batch-size and --max-new-tokens must be >= 1, --num-fewshot >= 0")
    if json_out is not None and json_out.exists():
        raise UserError(f"'{json_out}' already exists; pass a new file name (results are never overwritten)")
    adapter_dir = lookup.find_adapter(run)
    run_dir = lookup.run_of_adapter(adapter_dir)
    if run_dir is None and json_out is None:
        raise UserError(f"'{adapter_dir}' is not in a run folder, so there is nowhere to keep the evaluation; pass "
                        "--json FILE")

    def on_side(side: str, i: int, n: int) -> None:
        what = "the base (adapter off)" if side == "base" else "the adapter"
        console.print(f"[bold]{i + 1}/{n}[/] {what}: {', '.join(tasks)}", highlight=False)

    use_free_cores()  # this command's CPU threads: the cores other processes leave free (OMP_NUM_THREADS fixes it)
    ev = run_harness(adapter_dir, list(tasks), limit=int(limit) if limit and limit >= 1 else limit,
                     include_paths=list(include_path or []), meta=parse_metadata(list(metadata or [])),
                     num_fewshot=num_fewshot, batch_size=batch_size, chat_template=chat_template,
                     max_new_tokens=max_new_tokens,
                     local_only=local_only, model=model, on_side=on_side)
    print_eval(ev)
    if run_dir is not None:
        path = benchmarks.write_eval(run_dir, ev)
        console.print(f"kept in {escape(str(path))} (the card and `runs show` show the newest)", highlight=False,
                      soft_wrap=True)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({k: v for k, v in ev.items() if k != "samples"}, indent=2, default=str))
        console.print(f"[green]wrote[/] {escape(str(json_out))}")


def print_eval(ev: dict) -> None:
    t = Table(title=f"general ability: base vs adapter ({ev['run']})")
    for col, just in (("task", "left"), ("metric", "left"), ("rows", "right"), ("base", "right"),
                      ("adapter", "right"), ("change", "left")):
        t.add_column(col, justify=just)
    for row in ev["table"]:
        colour = {"better": "green", "worse": "red"}.get(row["change"], "white")
        metric = row["metric"] + (f" ({row['filter']})" if row.get("filter") not in (None, "none") else "")
        t.add_row(row["task"], metric, str(row.get("n") or ""), benchmarks.cell(row, "base"),
                  benchmarks.cell(row, "adapter"), f"[{colour}]{escape(benchmarks.change(row))}[/]")
    console.print(t)
    for line in benchmarks.leak_words(ev):  # task rows the adapter trained on: left out of both sides
        console.print(line, style="yellow", markup=False, highlight=False)
    s = ev["seconds"]
    asked = "plain prompts"
    if ev["chat_template"]:
        asked = "the chat template" + (" and the run's system prompt" if ev["system_instruction"] else "")
    console.print(f"lm-evaluation-harness {ev['lm_eval_version']}; {asked}; base {s['base']:.0f} s, adapter "
                  f"{s['adapter']:.0f} s", highlight=False)
