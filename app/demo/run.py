"""`qlora-app demo`: the whole job, offline, on a CPU, through the real engine.

1. the tiny shipped base model (4-bit NF4 via bitsandbytes on CPU),
2. a GRPO run with the shaped reward straight from that base (presets/demo-grpo.yaml),
3. base vs adapter, greedy, on held-out `arith` problems: the run's own proof (training.proof_rows), copied with the
   demo's stages to DIR/compare.json.

Nothing here trains or scores on its own: it runs one `Session`, whose proof is what a GPU user's run writes too, so
the demo proves the same code path. The whole gain it shows is GRPO's: there is no SFT phase.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from app.config.build import build_config
from app.config.builtin import BUILTIN_MODEL, TOOLS_MODEL
from app.demo.recipe import EVAL_SIZE, base_model_path, grpo_preset, tools_preset
from app.errors import RunFailed
from app.eval.render import print_result
from app.eval.result import Comparison
from app.run import layout, proof, store
from app.run.curves import series, sparkline
from app.train.running.session import Session

# --quick: the same path on a smaller budget, still long enough to show GRPO's lift (60 steps, 100 held-out problems:
# about 26 s on 2 cores; docs/performance.md has the seeds). The tools demo: QUICK_TOOLS.
QUICK = {"grpo_steps": 60, "eval": 100}
QUICK_TOOLS = {"grpo_steps": 40, "eval": 100}


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the demo's training: the run is kept (interrupted, resumable) and no lift is claimed."""


def _keep_previous(path: Path) -> None:
    """A second demo must not destroy the first one's result: move it aside with its timestamp."""
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
        os.replace(path, path.with_name(f"{path.stem}.{stamp}{path.suffix}"))


def stop_if_interrupted(run: Path, console) -> None:
    """Ctrl-C ends a demo: a half-trained adapter proves nothing, so no lift is claimed; the run is kept."""
    st = store.read_status(run) or {}
    if st.get("status") == layout.INTERRUPTED:
        console.print(f"[yellow]interrupted[/] at step {st.get('step')}: no comparison, no lift claimed; the run is "
                      f"kept in {escape(str(run))} (qlora-app train --resume {escape(str(run))} continues it)",
                      highlight=False)
        raise DemoInterrupted()


def run_proof(run: Path) -> Comparison:
    """The proof the run's session wrote as its training ended (training.proof_rows): the demo's result."""
    recorded = proof.latest_proof(run)
    if recorded is None:
        raise RunFailed(f"the demo's run made no held-out proof; see {run / layout.LOG}")
    return Comparison.from_dict(recorded)


def quarter_means(values: list[float]) -> tuple[float | None, float | None]:
    """Mean of the first and of the last quarter of a curve: whether it rose, without trusting one noisy point."""
    if not values:
        return None, None
    q = max(1, len(values) // 4)
    return sum(values[:q]) / q, sum(values[-q:]) / q


def run_demo(output_dir: Path, quick: bool = False, console=None, progress: bool | None = None, seed: int = 42,
             sets: list[str] | tuple = (), tools: bool = False):
    """Returns the final ``Comparison``; its config["demo"] holds the stages, the run folder and timings.

    ``seed`` is the one seed of the whole demo: training.seed (data order, LoRA init, GRPO's sampling) and the
    comparison's seed (evaluation is greedy on the whole held-out split). ``sets``: --set overrides of the demo's
    GRPO config (bench/bench_losses.py measures loss variants through them). ``tools``: the tools demo
    (presets/demo-tools.yaml: the calculator, arith-calc, the tiny tool-calling base)."""
    console = console or Console()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    timings: dict[str, float] = {}
    console.rule("[bold]qlora-app demo[/]: 4-bit QLoRA + GRPO " + ("with a calculator tool " if tools else "")
                 + "on CPU, offline")
    t = time.time()
    base = base_model_path(name=TOOLS_MODEL if tools else BUILTIN_MODEL)
    timings["prepare_model_s"] = time.time() - t
    console.print(f"base model: {base}")

    quick_budget = QUICK_TOOLS if tools else QUICK
    n_eval = quick_budget["eval"] if quick else EVAL_SIZE
    t = time.time()
    show = console.is_terminal if progress is None else progress
    grpo_dir = _train(base, output_dir, quick, seed, [*sets, f"training.proof_rows={n_eval}"], console, show, tools)
    timings["grpo_s"] = time.time() - t  # training, its held-out points and its proof
    quarters = _show_curves(grpo_dir, console)
    console.print(f"[bold]2/2[/] base vs adapter on {n_eval} held-out problems (greedy): the run's proof, written as "
                  "its training ended")
    result = run_proof(grpo_dir)
    timings["total_s"] = time.time() - t0
    out = _record(result, output_dir, grpo_dir, quick, seed, quarters, timings, tools)
    _print_outcome(result, console, grpo_dir, out, timings["total_s"])
    return result


def _train(base: Path, output_dir: Path, quick: bool, seed: int, sets, console, progress: bool,
           tools: bool = False) -> Path:
    """Stage 1: the GRPO run, through the one door every run takes. Ctrl-C ends the demo (DemoInterrupted)."""
    steps = (QUICK_TOOLS if tools else QUICK)["grpo_steps"]
    sets = [f"training.seed={seed}", *sets] + ([f"training.max_steps={steps}", "logging_steps=1"] if quick else [])
    console.print("[bold]1/2[/] GRPO with the shaped reward, straight from the 4-bit base (no warm-up)"
                  + (": the model answers with the calculator tool, TRL runs its calls" if tools else ""))
    preset, name = (tools_preset(base), "demo-tools") if tools else (grpo_preset(base), "demo-grpo")
    cfg = build_config({**preset, "output_dir": str(output_dir), "run_name": name}, sets=sets)
    grpo_dir = Session(cfg, progress=progress, console=console).run()
    stop_if_interrupted(grpo_dir, console)
    return grpo_dir


def _show_curves(grpo_dir: Path, console) -> tuple[float | None, float | None]:
    """The reward, its components and the held-out accuracy as sparklines; returns the reward's quarter means."""
    recs = store.read_metrics(grpo_dir)
    _, reward = series(recs, "reward")
    first_q, last_q = quarter_means(reward)
    if reward:  # sampled at temperature 1, a few prompts a point: noisy; the held-out line below is the learning
        console.print(f"   reward {sparkline(reward, 40)}  first quarter {first_q:.3f} -> last quarter {last_q:.3f} "
                      "(sampled, noisy)")
    for key in layout.component_keys(recs):
        _, ys = series(recs, key)
        console.print(f"   {layout.component_of(key):<11} {sparkline(ys, 40)}  {ys[0]:.3f} -> {ys[-1]:.3f}")
    steps, acc = series(recs, layout.EVAL_ACCURACY)
    if acc:  # the held-out evaluation during training: a smaller sample than the proof's, said with its rows
        rows = (store.read_status(grpo_dir) or {}).get(layout.EVAL_ROWS)
        console.print(f"   held-out    {sparkline(acc, 40)}  {acc[0]:.1%} (step {steps[0]}) -> {acc[-1]:.1%} "
                      f"(step {steps[-1]}), {rows} rows each")
    return first_q, last_q


def _record(result, output_dir: Path, grpo_dir: Path, quick: bool, seed: int, quarters, timings: dict,
            tools: bool = False) -> Path:
    """DIR/compare.json (the tools demo: DIR/compare-tools.json): the comparison with the demo's stages and timings
    (a previous one is kept aside)."""
    s = result.summary
    # Ordered: the first entry is where GRPO started (the base), the last what it made.
    stages = {"base": {"accuracy": s.base.accuracy, "mean_reward": s.base.mean_reward,
                       "tool_success": s.base.tool_success},
              "grpo": {"accuracy": s.adapter.accuracy, "mean_reward": s.adapter.mean_reward,
                       "tool_success": s.adapter.tool_success}}
    result.config["demo"] = {
        "quick": quick, "seed": seed, "tools": tools, "grpo_run": str(grpo_dir), "stages": stages,
        "grpo_lift": stages["grpo"]["accuracy"] - stages["base"]["accuracy"],
        "grpo_reward_quarters": {"first": quarters[0], "last": quarters[1]},
        "timings": {k: round(v, 1) for k, v in timings.items()}}
    out = output_dir / (layout.DEMO_TOOLS_JSON if tools else layout.COMPARE_JSON)
    _keep_previous(out)
    store.write_atomic(out, json.dumps(result.to_dict(), indent=2))
    return out


def _print_outcome(result, console, grpo_dir: Path, out: Path, total_s: float) -> None:
    from rich.table import Table

    print_result(result, console, max_rows=4)
    stages = result.config["demo"]["stages"]
    st = Table(title=f"held-out accuracy by phase ({result.summary.n} held-out problems, greedy)")
    tools = stages["base"].get("tool_success") is not None
    for col in ("model", "accuracy", "mean shaped reward") + (("tool calls succeeded",) if tools else ()):
        st.add_column(col, justify="left" if col == "model" else "right")
    for name, label in (("base", "base (4-bit)"), ("grpo", "+ GRPO (final adapter)")):
        st.add_row(label, f"{stages[name]['accuracy']:.1%}", f"{stages[name]['mean_reward']:.3f}",
                   *((f"{stages[name]['tool_success']:.1%}",) if tools else ()))
    console.print(st)
    s, lift = result.summary, result.config["demo"]["grpo_lift"]
    console.print(
        f"\nGRPO's own lift: [bold]{lift * 100:+.1f} points[/] of held-out accuracy on {s.n} problems (base "
        f"{s.base.accuracy:.1%} -> adapter [bold green]{s.adapter.accuracy:.1%}[/]); mean reward "
        f"{s.base.mean_reward:.3f} -> {s.adapter.mean_reward:.3f}")
    console.print(f"curves: {grpo_dir / layout.CURVES}")
    console.print(f"comparison: {out}  (total {total_s:.0f} s)")
