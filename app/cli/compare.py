"""`qlora-app compare` (and compare_base_vs_lora.py): run a comparison, print it, write --json / --html."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from app.errors import UserError
from app.eval.compare import run_comparison
from app.eval.render import page_html, pictureless, print_result
from app.host.threads import use_free_cores
from app.run import layout

DEFAULT_SAMPLES = 20  # held-out rows `compare RUN` compares when it is given neither --num-samples nor --prompt


def one_target(run: Path | None, adapter: Path | None) -> Path:
    """The run or adapter to compare: RUN or --adapter (one of them; the same one twice is fine)."""
    if run is None and adapter is None:
        raise UserError("which adapter? qlora-app compare RUN (a run folder, a run name or an adapter folder)")
    if run is not None and adapter is not None and Path(run) != Path(adapter):
        raise UserError(f"two adapters given ({run} and --adapter {adapter}); pass one")
    return Path(run if run is not None else adapter)


def _write_new(path: Path, text: str) -> None:
    """Results are never overwritten: an existing file is an error, not a silent replacement."""
    path = Path(path)
    if path.exists():
        raise UserError(f"'{path}' already exists; pass a new file name (results are never overwritten)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_compare_cli(adapter, json_out=None, html_out=None, console=None, **request) -> int:
    """Run ``run_comparison(adapter, **request)`` (its parameters are the comparison's one list), print the
    side-by-side table and summary, write --json / --html. Returns 0."""
    console = console or Console()
    if request.get("num_samples") is None:  # neither given: the held-out rows; with prompts: only those
        request["num_samples"] = 0 if request.get("prompts") else DEFAULT_SAMPLES
    for p in (json_out, html_out):  # fail before minutes of generation, not after
        if p is not None and Path(p).exists():
            raise UserError(f"'{p}' already exists; pass a new file name (results are never overwritten)")
    use_free_cores()  # this command's CPU threads: the cores other processes leave free (OMP_NUM_THREADS fixes it)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("generating", total=None)
        result = run_comparison(adapter, **request, progress=lambda d, t: bar.update(task, completed=d, total=t))
    print_result(result, console)
    asked, held = result.config.get("num_samples") or 0, result.config.get("heldout_rows")
    if held is not None and 0 < asked and held < asked:
        console.print(f"[yellow]note:[/] {held} held-out rows compared, not {asked}: the data holds no more (its test "
                      "split, or the rows the run held out: data.heldout_size)", highlight=False)
    if result.config.get("kept_in"):
        console.print(f"kept in {escape(result.config['kept_in'])} (an ad-hoc comparison; the run's proof, "
                      f"{layout.COMPARE_JSON}, is the one training ended with and stays as it is)", highlight=False,
                      soft_wrap=True)
    if pictureless(result):
        console.print(f"[yellow]{escape(pictureless(result))}[/]", highlight=False)
    cut = result.config.get("prompts_cut")
    if cut:
        console.print(f"[yellow]note:[/] {cut} prompt(s) were longer than the model's context leaves beside "
                      f"--max-new-tokens {result.config.get('max_new_tokens')}; both sides saw only their last tokens")
    if json_out is not None:
        _write_new(json_out, json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        console.print(f"[green]wrote[/] {escape(str(json_out))}")
    if html_out is not None:
        _write_new(html_out, page_html(result))
        console.print(f"[green]wrote[/] {escape(str(html_out))}")
    return 0
