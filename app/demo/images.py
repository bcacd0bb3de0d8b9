"""`qlora-app demo --images`: a vision-language model fine-tuned on images, offline on a CPU, through the real engine.

1. the tiny shipped vision-language base (shapes-vlm-base: Gemma 3 shaped, app/demo/build_vision_base.py), its
   language model in 4-bit NF4 and its vision tower in 16-bit;
2. a QLoRA SFT run on the built-in ``shapes`` images (presets/demo-images.yaml): "What color is the <shape>?";
3. base vs adapter, greedy, on the 200 held-out images: the run's own proof, copied with the demo's stages to
   DIR/compare-images.json.
Measured over seeds in docs/performance.md (``python bench/bench_images.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from app.config.build import build_config
from app.config.methods import METHODS
from app.config.builtin import VISION_MODEL
from app.demo.recipe import base_model_path, images_preset
from app.demo.run import _keep_previous, run_proof, stop_if_interrupted
from app.eval.render import print_result
from app.run import layout, store
from app.run.curves import series, sparkline
from app.train.running.session import Session

QUICK = {"steps": 200, "eval": 100}  # --quick: the same training, a smaller proof (150 steps fell to +27 on a seed)


def run_images_demo(output_dir: Path, quick: bool = False, console=None, progress: bool | None = None,
                    seed: int = 42, sets: list[str] | tuple = (), method: str = "sft"):
    """Returns the final ``Comparison``; its config["demo"] holds the stages, the run folder and timings.
    ``seed``: training.seed (data order, LoRA init, GRPO's sampling); the evaluation is greedy on the whole held-out
    split. ``method``: sft (presets/demo-images.yaml) or grpo (presets/demo-images-grpo.yaml)."""
    console = console or Console()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    console.rule(f"[bold]qlora-app demo --images[/]: 4-bit QLoRA {method.upper()} of a vision-language model on CPU, "
                 "offline")
    base = base_model_path(name=VISION_MODEL)
    console.print(f"base model: {base} (vision tower 16-bit, language model 4-bit)")
    rewarded = METHODS[method].rewarded  # GRPO: sampled answers and the shaped reward; SFT: the labels
    preset = images_preset(base, grpo=rewarded)
    n_eval = QUICK["eval"] if quick else preset["training"]["proof_rows"]
    sets = [f"training.seed={seed}", f"training.proof_rows={n_eval}", *sets]
    if quick and not rewarded:
        sets.append(f"training.max_steps={QUICK['steps']}")
    console.print(f"[bold]1/2[/] {method.upper()} on the built-in shapes images: 'What color is the <shape>?'"
                  + (" (8 sampled answers a picture, the shaped reward)" if rewarded else ""))
    cfg = build_config({**preset, "output_dir": str(output_dir), "run_name": f"demo-images-{method}"}, sets=sets)
    show = console.is_terminal if progress is None else progress
    run = Session(cfg, progress=show, console=console).run()
    stop_if_interrupted(run, console)
    train_s = time.time() - t0
    steps, acc = series(store.read_metrics(run), layout.EVAL_ACCURACY)
    if acc:
        console.print(f"   held-out    {sparkline(acc, 40)}  {acc[0]:.1%} (step {steps[0]}) -> {acc[-1]:.1%} "
                      f"(step {steps[-1]})")
    console.print(f"[bold]2/2[/] base vs adapter on {n_eval} held-out images (greedy): the run's proof")
    result = run_proof(run)
    s = result.summary
    lift = s.adapter.accuracy - s.base.accuracy
    stages = {"base": {"accuracy": s.base.accuracy}, method: {"accuracy": s.adapter.accuracy}}
    result.config["demo"] = {"quick": quick, "seed": seed, "images": True, "method": method, "run": str(run),
                             "stages": stages, "lift": lift,
                             "timings": {"train_s": round(train_s, 1), "total_s": round(time.time() - t0, 1)}}
    out = output_dir / (layout.DEMO_IMAGES_GRPO_JSON if rewarded else layout.DEMO_IMAGES_JSON)
    _keep_previous(out)
    store.write_atomic(out, json.dumps(result.to_dict(), indent=2))
    print_result(result, console, max_rows=4)
    console.print(f"\n{method.upper()}'s lift: [bold]{lift * 100:+.1f} points[/] of held-out accuracy on {s.n} images "
                  f"(base {s.base.accuracy:.1%} -> adapter [bold green]{s.adapter.accuracy:.1%}[/])")
    console.print(f"comparison: {out}  (total {time.time() - t0:.0f} s)")
    return result
