"""`qlora-app demo --method dpo` (or `kto`): preference pairs from a reward, then DPO (or KTO on each pair split into a
good and a bad answer), offline on a CPU, through the real engine.

1. pairs (app/synth/pairs.py, as `qlora-app pairs` makes them): the shipped tiny base in 4-bit answers every built-in
   `arith` training prompt 8 times at temperature 1; the shaped reward scores the answers; the best and the worst
   make a pair where their scores differ. The held-out problems get their pairs too (test.jsonl), for preference
   accuracy;
2. a DPO (or KTO) run on those pairs from the same base (presets/demo-dpo.yaml, its method switched), through one
   `Session`;
3. its proof: greedy base vs adapter on the held-out problems, and which answer of each held-out pair base and
   adapter find more likely; copied with the demo's stages to DIR/compare-dpo.json (compare-kto.json).
Measured over seeds in docs/performance.md (``python bench/bench_dpo.py [--method kto]``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from app.config.build import build_config
from app.config.methods import METHODS
from app.config.presets import load_preset
from app.demo.recipe import EVAL_SIZE, base_model_path
from app.demo.run import _keep_previous, run_proof, stop_if_interrupted
from app.synth.pairs import MANIFEST, PairsRequest, make_pairs
from app.eval.render import print_result
from app.eval.result import Comparison
from app.run import layout, store
from app.run.curves import series, sparkline
from app.train.running.session import Session

# The pairs: answers as long as the GRPO demo lets a completion be (arith answers are ~15 tokens).
PAIRS = PairsRequest(samples=8, temperature=1.0, max_new_tokens=40, max_heldout=EVAL_SIZE)
# --quick: fewer prompts, fewer steps, a smaller proof (docs/performance.md has the seeds).
QUICK = {"max_prompts": 800, "steps": 40, "eval": 100}


def demo_config(base: Path | str, **data) -> dict:
    """presets/demo-dpo.yaml as an AppConfig-shaped dict on the shipped base (``data``: data keys to set)."""
    d = load_preset("demo-dpo")
    d["model"]["name_or_path"] = str(base)
    d["data"].update(data)
    return d


def run_dpo_demo(output_dir: Path, quick: bool = False, console=None, progress: bool | None = None,
                 seed: int = 42, method: str = "dpo") -> Comparison:
    """Returns the run's proof; its config["demo"] holds the stages, the folders and the timings. ``method``: dpo or
    kto (the same pairs, each split into a good and a bad answer)."""
    console = console or Console()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    show = console.is_terminal if progress is None else progress
    t0, timings = time.time(), {}
    name = method.upper()
    console.rule(f"[bold]qlora-app demo --method {method}[/]: pairs from a reward, then 4-bit QLoRA + {name} on CPU, "
                 "offline")
    base = base_model_path()
    n_eval = QUICK["eval"] if quick else EVAL_SIZE

    console.print(f"[bold]1/3[/] pairs: the base answers each arith prompt {PAIRS.samples} times; the shaped reward "
                  "picks the best (chosen) and the worst (rejected)")
    t = time.time()
    pairs_dir = _pairs(base, output_dir / f"demo-pairs-{seed}{'-quick' if quick else ''}", quick, seed, console)
    timings["pairs_s"] = time.time() - t
    counts = json.loads((pairs_dir / MANIFEST).read_text())["splits"]
    console.print(f"   {counts['train']['pairs']} pairs from {counts['train']['done']} prompts; "
                  f"{counts['test']['pairs']} of the {counts['test']['rows']} held-out problems have one too")

    split = " (each pair as a good and a bad answer)" if METHODS[method].rows == "labelled" else ""
    console.print(f"[bold]2/3[/] {name} on the pairs{split}, from the same 4-bit base (the base is also the "
                  "reference)")
    t = time.time()
    sets = [f"training.seed={seed}", f"training.proof_rows={n_eval}"] + (
        [f"training.max_steps={QUICK['steps']}"] if quick else [])
    # the system prompt the pairs were sampled with is the preset's: said here, so the plan has nothing to adopt
    cfg = build_config({**demo_config(base, dataset=str(pairs_dir)), "method": method,
                        "output_dir": str(output_dir), "run_name": f"demo-{method}"}, sets=sets)
    run = Session(cfg, progress=show, console=console).run()
    timings[f"{method}_s"] = time.time() - t
    stop_if_interrupted(run, console)
    _show_curves(run, console)

    console.print(f"[bold]3/3[/] base vs adapter on {n_eval} held-out problems (greedy) and their pairs: the run's "
                  "proof")
    result = run_proof(run)
    timings["total_s"] = time.time() - t0
    out = _record(result, output_dir, pairs_dir, run, quick, seed, timings, method)
    _print_outcome(result, console, run, out, timings["total_s"])
    return result


def _pairs(base: Path, folder: Path, quick: bool, seed: int, console) -> Path:
    """The demo's pairs folder: made, continued after an interruption, or reused when complete."""
    cfg = build_config(demo_config(base, dataset="arith"), sets=[f"training.seed={seed}"])
    req = PairsRequest(**{**PAIRS.__dict__, "max_prompts": QUICK["max_prompts"] if quick else None})
    manifest = folder / MANIFEST
    state = json.loads(manifest.read_text()) if manifest.is_file() else None
    if state and state.get("complete"):
        console.print(f"   reusing the pairs in {escape(str(folder))}")
        return folder
    if folder.exists() and state is None:
        _keep_previous(folder)
    said = -1  # the last tenth said

    def progress(done: int, total: int) -> None:  # a line at each tenth: the stage is minutes long on a busy CPU
        nonlocal said
        tenth = done * 10 // max(total, 1)
        if tenth > said:
            said = tenth
            console.print(f"   pairs: {done} of {total} prompts sampled and scored", highlight=False)

    make_pairs(cfg, folder, req, resume=state is not None, on_progress=progress)
    return folder


def _show_curves(run: Path, console) -> None:
    recs = store.read_metrics(run)
    for key, label in ((layout.DPO_ACCURACY, "pref. acc."), (layout.DPO_MARGIN, "margin")):
        _, ys = series(recs, key)
        if ys:
            console.print(f"   {label:<11} {sparkline(ys, 40)}  {ys[0]:.3f} -> {ys[-1]:.3f} (training batches)")
    for key, label, fmt in ((layout.EVAL_ACCURACY, "held-out", "{:.1%}"),
                            (layout.EVAL_PREF_ACCURACY, "pref. acc.", "{:.1%}")):
        steps, ys = series(recs, key)
        if ys:
            console.print(f"   {label:<11} {sparkline(ys, 40)}  {fmt.format(ys[0])} (step {steps[0]}) -> "
                          f"{fmt.format(ys[-1])} (step {steps[-1]})")


def _record(result: Comparison, output_dir: Path, pairs_dir: Path, run: Path, quick: bool, seed: int,
            timings: dict, method: str) -> Path:
    s, p = result.summary, result.preference or {}
    result.config["demo"] = {
        "method": method, "quick": quick, "seed": seed, "pairs": str(pairs_dir), f"{method}_run": str(run),
        "stages": {"base": {"accuracy": s.base.accuracy, "chosen_more_likely": p.get("base_likelier")},
                   method: {"accuracy": s.adapter.accuracy, "chosen_more_likely": p.get("adapter_likelier"),
                            "preference_accuracy": p.get("accuracy")}},
        f"{method}_lift": s.adapter.accuracy - s.base.accuracy,
        "timings": {k: round(v, 1) for k, v in timings.items()}}
    out = output_dir / layout.demo_preference_json(method)
    _keep_previous(out)
    store.write_atomic(out, json.dumps(result.to_dict(), indent=2))
    return out


def _print_outcome(result: Comparison, console, run: Path, out: Path, total_s: float) -> None:
    print_result(result, console, max_rows=4)
    demo = result.config["demo"]
    s, lift = result.summary, demo[f"{demo['method']}_lift"]
    console.print(f"\n{demo['method'].upper()}'s lift: [bold]{lift * 100:+.1f} points[/] of held-out accuracy on "
                  f"{s.n} problems (base {s.base.accuracy:.1%} -> adapter [bold green]{s.adapter.accuracy:.1%}[/])")
    console.print(f"curves: {run / layout.CURVES}")
    console.print(f"comparison: {out}  (total {total_s:.0f} s)")
