"""The Compare tab: base vs adapter through app.eval.compare.run_comparison (no Gradio here; app.eval.render draws it)."""

from __future__ import annotations

from pathlib import Path

from app.errors import UserError
from app.eval.compare import run_comparison
from app.host.threads import use_free_cores
from app.run import layout, lookup, store
from app.ui.folders import run_path, shown_runs

DEFAULT_ROWS = 16  # held-out rows the Compare tab starts with: enough to read, quick on a CPU


def compare_choices(runs_dir: str | Path) -> list[str]:
    """Runs that have an adapter to compare, newest first (demo-runs/ beside the runs folder too)."""
    return [label for label, d in shown_runs(runs_dir) if lookup.has_adapter(d)]


def _ending(jobs) -> bool:
    st = (store.read_status(jobs.run_dir) or {}).get("status") if jobs.run_dir else None
    return st in (layout.FINISHED, layout.FAILED, layout.INTERRUPTED)


def wait_for_gpu(jobs, what: str) -> None:
    """Refuse while a training run holds the GPU; a run that has just ended gets a moment to exit."""
    if jobs.is_running() and _ending(jobs):
        # The engine marks the run finished, then writes curves.png and exits: give it a moment to free the GPU.
        try:
            jobs.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - still running: refused below
            pass
    if jobs.is_running():
        raise UserError(f"a training run is using the GPU; wait for it to finish or Stop it, then {what}")


def compare(jobs, runs_dir: str | Path, name: str, prompt: str | None, num_samples: int, max_new_tokens: int,
            local_only: bool, progress=None):
    """A ``Comparison`` of base vs adapter for a run, refused while training holds the GPU."""
    if not name:
        raise UserError("select a run with an adapter (finished or stopped runs have one)")
    wait_for_gpu(jobs, "compare")
    d = lookup.require_run_dir(run_path(runs_dir, name))
    prompts = [prompt.strip()] if prompt and prompt.strip() else []
    n = int(num_samples or 0)
    if not prompts and n <= 0:
        raise UserError("type a prompt or choose a number of held-out rows to sample")

    use_free_cores()  # a UI action is a command of this process: the cores a training job leaves free
    return run_comparison(d, num_samples=n, prompts=prompts, max_new_tokens=int(max_new_tokens or 128),
                          local_only=bool(local_only), progress=progress)
