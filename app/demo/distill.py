"""`qlora-app demo --method distill`: a larger teacher's knowledge into the demo's tiny base, on-policy, offline on a
CPU, through the real engine.

1. the teacher: ``arith-teacher`` (app/demo/build_teacher.py: about 2.5x arith-base's parameters, on its tokenizer,
   right far more often), shipped or built once, in 4-bit as a user's teacher loads;
2. a distillation run from the shipped base (presets/demo-distill.yaml): the student answers built-in `arith`
   prompts at temperature 1 and learns the teacher's next-token distribution on every token of its answers (reverse
   KL), through one `Session`;
3. its proof: greedy base, student and teacher on the same held-out problems, and how much of the teacher's lead
   the student closed; copied with the demo's stages to DIR/compare-distill.json.
Measured over seeds, beside GRPO on the same machine, in docs/performance.md (``python bench/bench_distill.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from app.config.build import build_config, load_yaml_file
from app.config.builtin import BUILTIN_MODEL, TEACHER_MODEL
from app.config.method_sections import DISTILL_MODES
from app.config.presets import load_preset
from app.demo.build_teacher import teacher_gguf
from app.demo.recipe import EVAL_SIZE, base_model_path
from app.demo.run import _keep_previous, run_proof, stop_if_interrupted
from app.eval.render import print_result
from app.eval.result import Comparison
from app.run import layout, store
from app.run.curves import series, sparkline
from app.train.running.session import Session

QUICK = {"steps": 40, "eval": 100}  # --quick: fewer steps and a smaller proof (docs/performance.md has the seeds)


def demo_config(base: Path | str, teacher: Path | str) -> dict:
    """presets/demo-distill.yaml as an AppConfig-shaped dict on the shipped base and teacher."""
    d = load_preset("demo-distill")
    d["model"]["name_or_path"] = str(base)
    d["distill"]["teacher"] = str(teacher)
    return d


def run_distill_demo(output_dir: Path, quick: bool = False, console=None, progress: bool | None = None,
                     seed: int = 42, sets: list[str] | tuple = (), gguf_teacher: bool = False) -> Comparison:
    """Returns the run's proof (base, student, teacher); its config["demo"] holds the stages, the run folder, the
    timings and the tokens the student sampled. ``sets``: --set overrides of the demo's config (the bench's
    off-policy variant); ``gguf_teacher``: the teacher exported to a Q4_K_M GGUF, run by llama.cpp in a child
    process (its top-k log-probabilities the signal)."""
    console = console or Console()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    show = console.is_terminal if progress is None else progress
    t0, timings = time.time(), {}
    console.rule("[bold]qlora-app demo --method distill[/]: a larger teacher into the 4-bit tiny base, on CPU, "
                 "offline")
    base, teacher = base_model_path(name=BUILTIN_MODEL), base_model_path(name=TEACHER_MODEL)
    if gguf_teacher:  # exported once (convert + quantize, seconds), then llama.cpp runs it beside the training
        teacher = teacher_gguf(teacher)
    timings["prepare_models_s"] = time.time() - t0
    console.print(f"student: {base}\nteacher: {teacher}")
    n_eval = QUICK["eval"] if quick else EVAL_SIZE
    steps = [f"training.max_steps={QUICK['steps']}"] if quick else []
    cfg = build_config({**demo_config(base, teacher), "output_dir": str(output_dir), "run_name": "demo-distill"},
                       sets=[f"training.seed={seed}", f"training.proof_rows={n_eval}", *steps, *sets])
    console.print(f"[bold]1/2[/] distillation, {DISTILL_MODES[cfg.distill.mode]}"
                  + (f" (beta {cfg.distill.beta:g})" if cfg.distill.mode == "on_policy" else ""))
    t = time.time()
    run = Session(cfg, progress=show, console=console).run()
    stop_if_interrupted(run, console)
    timings["distill_s"] = time.time() - t  # training, its held-out points and its three-sided proof
    _show_curves(run, console)
    console.print(f"[bold]2/2[/] base, student and teacher on {n_eval} held-out problems (greedy): the run's proof")
    result = run_proof(run)
    timings["total_s"] = time.time() - t0
    out = _record(result, output_dir, run, quick, seed, timings)
    _print_outcome(result, console, run, out, timings["total_s"])
    return result


def sampled_tokens(records: list[dict], per_step: int) -> int:
    """Tokens the student sampled in training: each logged step's mean answer length x the answers a step samples
    (logged every step in the demo; a line standing for several steps counts them all)."""
    total, last = 0.0, 0
    for r in records:
        if "completions/mean_length" in r and "step" in r:
            total += r["completions/mean_length"] * per_step * (r["step"] - last)
            last = r["step"]
    return round(total)


def _show_curves(run: Path, console) -> None:
    """The divergence (TRL's loss) falling and the held-out accuracy rising, as sparklines."""
    recs = store.read_metrics(run)
    _, loss = series(recs, "loss")
    if loss:  # a fresh sample each step: noisy
        console.print(f"   divergence  {sparkline(loss, 40)}  {loss[0]:.3f} -> {loss[-1]:.3f} (the student's "
                      "samples, scored by the teacher: noisy)")
    steps, div = series(recs, layout.EVAL_DIVERGENCE)
    if div:
        console.print(f"   held-out KL {sparkline(div, 40)}  {div[0]:.3f} (step {steps[0]}) -> {div[-1]:.3f} "
                      f"(step {steps[-1]}): the divergence on the student's answers to the same held-out rows")
    steps, acc = series(recs, layout.EVAL_ACCURACY)
    if acc:
        rows = (store.read_status(run) or {}).get(layout.EVAL_ROWS)
        console.print(f"   held-out    {sparkline(acc, 40)}  {acc[0]:.1%} (step {steps[0]}) -> {acc[-1]:.1%} "
                      f"(step {steps[-1]}), {rows} rows each")


def _record(result: Comparison, output_dir: Path, run: Path, quick: bool, seed: int, timings: dict) -> Path:
    s = result.summary
    status = store.read_status(run) or {}
    t = result.config
    stages = {name: {"accuracy": side.accuracy, "mean_reward": side.mean_reward, "mean_tokens": side.mean_tokens}
              for name, side in (("base", s.base), ("distill", s.adapter), ("teacher", s.teacher)) if side}
    recs = store.read_metrics(run)
    per_step = _answers_per_step(run)
    t["demo"] = {"quick": quick, "seed": seed, "run": str(run), "stages": stages,
                 "lift": s.adapter.accuracy - s.base.accuracy, "closed": s.closed,
                 "sampled_tokens": sampled_tokens(recs, per_step), "steps": status.get("step"),
                 "timings": {k: round(v, 1) for k, v in timings.items()}}
    out = output_dir / layout.DEMO_DISTILL_JSON
    _keep_previous(out)
    store.write_atomic(out, json.dumps(result.to_dict(), indent=2))
    return out


def _answers_per_step(run: Path) -> int:
    """Answers the student samples per optimizer step: the micro-batch x accumulation of the run's config."""
    t = load_yaml_file(run / layout.CONFIG).get("training") or {}
    return int(t.get("per_device_train_batch_size") or 1) * int(t.get("gradient_accumulation_steps") or 1)


def _print_outcome(result: Comparison, console, run: Path, out: Path, total_s: float) -> None:
    from rich.table import Table

    print_result(result, console, max_rows=3)
    d = result.config["demo"]
    st = Table(title=f"held-out accuracy ({result.summary.n} held-out problems, greedy)")
    for col in ("model", "accuracy", "mean shaped reward"):
        st.add_column(col, justify="left" if col == "model" else "right")
    outside = str(result.config.get("teacher") or "").endswith(".gguf")
    for name, label in (("base", "student before (4-bit base)"), ("distill", "+ distillation (final adapter)"),
                        ("teacher", "teacher (Q4_K_M GGUF, llama.cpp)" if outside else "teacher (4-bit)")):
        if name in d["stages"]:
            st.add_row(label, f"{d['stages'][name]['accuracy']:.1%}", f"{d['stages'][name]['mean_reward']:.3f}")
    console.print(st)
    closed = f", {d['closed']:.0%} of the teacher's lead closed" if d.get("closed") is not None else ""
    console.print(f"\ndistillation's lift: [bold]{d['lift'] * 100:+.1f} points[/] of held-out accuracy{closed}; "
                  f"{d['sampled_tokens']} tokens sampled by the student in {d['steps']} steps")
    console.print(f"curves: {escape(str(run / layout.CURVES))}")
    console.print(f"comparison: {escape(str(out))}  (total {total_s:.0f} s)")
