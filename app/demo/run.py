"""`qlora-app demo`: the whole job, offline, on a CPU, through the real engine.

1. the tiny shipped base model (4-bit NF4 via bitsandbytes on CPU),
2. an SFT warm-up run, then a GRPO run with the shaped reward starting from that adapter,
3. base vs adapter, greedy, on held-out `arith` problems -> DIR/compare.json.

Nothing here trains or scores on its own: it only chains `run_training` and `run_comparison`, so the demo proves
the same code path a GPU user runs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from app import rundir

# --quick: the same path with a budget small enough for a test (about 25 s on 2 cores).
QUICK = {"sft_steps": 4, "grpo_steps": 2, "eval": 12}


def _keep_previous(path: Path) -> None:
    """A second demo must not destroy the first one's result: move it aside with its timestamp."""
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
        os.replace(path, path.with_name(f"{path.stem}.{stamp}{path.suffix}"))


def run_demo(output_dir: Path, quick: bool = False, console=None, progress: bool | None = None):
    """Returns the final ``Comparison``; its config["demo"] holds the stages, run folders and timings."""
    from rich.console import Console

    from app.eval.compare import run_comparison
    from app.eval.render import print_result
    from app.config import build_config
    from app.demo.recipe import EVAL_MAX_NEW_TOKENS, EVAL_SIZE, base_model_path, grpo_preset, sft_preset
    from app.plots import series, sparkline
    from app.train.runner import run_training

    console = console or Console()
    show = console.is_terminal if progress is None else progress
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    timings: dict[str, float] = {}

    console.rule("[bold]qlora-app demo[/]: 4-bit QLoRA + GRPO on CPU, offline")
    t = time.time()
    base = base_model_path()
    timings["prepare_model_s"] = time.time() - t
    console.print(f"base model: {base}")

    layer = {"output_dir": str(output_dir)}
    sft_sets = [f"training.max_steps={QUICK['sft_steps']}", "logging_steps=1"] if quick else []
    grpo_sets = [f"training.max_steps={QUICK['grpo_steps']}", "logging_steps=1"] if quick else []

    console.print("[bold]1/3[/] SFT warm-up: teach the 'Final answer: N' format")
    t = time.time()
    sft_cfg = build_config({**sft_preset(base), **layer, "run_name": "demo-sft"}, sets=sft_sets)
    sft_dir = run_training(sft_cfg, progress=show, console=console)
    timings["sft_s"] = time.time() - t
    _, loss = series(rundir.read_metrics(sft_dir), "loss")
    console.print(f"   loss   {sparkline(loss, 40)}  {loss[0]:.3f} -> {loss[-1]:.3f}" if loss else "")

    console.print("[bold]2/3[/] GRPO with the shaped reward, starting from the warm-up adapter")
    t = time.time()
    grpo_cfg = build_config({**grpo_preset(sft_dir, base), **layer, "run_name": "demo-grpo"}, sets=grpo_sets)
    grpo_dir = run_training(grpo_cfg, progress=show, console=console)
    timings["grpo_s"] = time.time() - t
    recs = rundir.read_metrics(grpo_dir)
    _, reward = series(recs, "reward")
    if reward:
        console.print(f"   reward {sparkline(reward, 40)}  {reward[0]:.3f} -> {reward[-1]:.3f}")
    for key in sorted({k for r in recs for k in r if k.startswith("rewards/") and k.endswith("/mean")}):
        _, ys = series(recs, key)
        console.print(f"   {key.split('/')[1]:<11} {sparkline(ys, 40)}  {ys[0]:.3f} -> {ys[-1]:.3f}")

    n_eval = QUICK["eval"] if quick else EVAL_SIZE
    console.print(f"[bold]3/3[/] base vs adapter on {n_eval} held-out problems (greedy)")
    t = time.time()
    result = run_comparison(grpo_dir, num_samples=n_eval, max_new_tokens=EVAL_MAX_NEW_TOKENS, batch_size=50,
                            local_only=True)
    timings["compare_s"] = time.time() - t
    # The warm-up adapter on the same rows, so the user sees what each phase contributed (not only the total).
    warm = run_comparison(sft_dir, num_samples=n_eval, max_new_tokens=EVAL_MAX_NEW_TOKENS, batch_size=50,
                          local_only=True).summary.adapter
    timings["total_s"] = time.time() - t0
    s = result.summary
    stages = {
        "base": {"accuracy": s.base.accuracy, "mean_reward": s.base.mean_reward},
        "sft_warmup": {"accuracy": warm.accuracy, "mean_reward": warm.mean_reward},
        "grpo": {"accuracy": s.adapter.accuracy, "mean_reward": s.adapter.mean_reward},
    }
    result.config["demo"] = {"quick": quick, "sft_run": str(sft_dir), "grpo_run": str(grpo_dir), "stages": stages,
                             "timings": {k: round(v, 1) for k, v in timings.items()}}
    out = output_dir / rundir.COMPARE_JSON
    _keep_previous(out)
    rundir.write_atomic(out, json.dumps(result.to_dict(), indent=2))

    print_result(result, console, max_rows=4)
    from rich.table import Table

    st = Table(title="held-out accuracy by phase")
    for col in ("model", "accuracy", "mean shaped reward"):
        st.add_column(col, justify="left" if col == "model" else "right")
    for name, label in (("base", "base (4-bit)"), ("sft_warmup", "+ SFT warm-up"), ("grpo", "+ GRPO (final adapter)")):
        st.add_row(label, f"{stages[name]['accuracy']:.1%}", f"{stages[name]['mean_reward']:.3f}")
    console.print(st)
    b, a = s.base.accuracy, s.adapter.accuracy
    console.print(
        f"\n[bold]held-out accuracy[/]: base {b:.1%} -> adapter [bold green]{a:.1%}[/] "
        f"({(a - b) * 100:+.1f} points); mean reward {s.base.mean_reward:.3f} -> {s.adapter.mean_reward:.3f}"
    )
    console.print(f"curves: {grpo_dir / rundir.CURVES}, {sft_dir / rundir.CURVES}")
    console.print(f"comparison: {out}  (total {timings['total_s']:.0f} s)")
    return result
