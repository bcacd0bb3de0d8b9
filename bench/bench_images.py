"""images: qlora-app's SFT on images against a hand-written TRL script, in one run.

    python bench/bench_images.py [--json]

  image_sft_overhead_vs_trl   s/optimizer step of `qlora-app train --preset demo-images` on a random Gemma 3 shaped
                              vision-language model of ~23M parameters (the demo's processor; a 6-layer 512-wide
                              language model, a 4-layer 256-wide tower: a step long enough to time, where the demo's
                              150K-parameter base steps in ~0.1 s and the ratio drowns in noise) and the built-in
                              shapes images / TRL's SFTTrainer with the same processor, model (NF4 language model,
                              16-bit vision side), rows, LoRA and hyperparameters (bench/plain_trl.py's image side),
                              alternated (ours, plain, ...), checked to train on the same tokens (equal num_tokens)
                              with the same loss at step 1.

Our side runs with the held-out evaluation and the proof off (they are not training steps). CPU, offline. Rewrites
the `## images bench` section of docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_trl import _run, first_loss, num_tokens, plain  # noqa: E402
from perfdoc import write_section  # noqa: E402
from ratio import TOLERANCE, as_json, interleave, ratio  # noqa: E402
from steptimer import summary  # noqa: E402

REPS = 7
SPEC = {"method": "images", "steps": 20, "batch": 16, "lr": 5e-3, "r": 16, "alpha": 32, "seed": 42}


def ours(spec: dict, tmp: Path, tag: str) -> dict:
    sets = [f"model.name_or_path={spec['model']}", f"training.max_steps={spec['steps']}",
            f"training.per_device_train_batch_size={spec['batch']}", f"training.learning_rate={spec['lr']}",
            f"training.seed={spec['seed']}", "training.logging_steps=1", "training.save_steps=100000",
            "training.eval_every=0", "training.proof_rows=0", "runtime.backend=hf"]
    argv = [sys.executable, str(HERE / "steptimer.py"), "--", "train", "--preset", "demo-images", "--local-only",
            "--no-progress", "--output-dir", str(tmp / f"runs-{tag}")]
    for s in sets:
        argv += ["--set", s]
    return _run(argv, tmp / f"{tag}.json")


TEXT = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=4,
            head_dim=64)
TOWER = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4)


def main() -> None:
    from app.demo.build_vision_base import tiny_vision_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--reps", type=int, default=REPS)
    a = p.parse_args()
    recs: dict = {"ours": [], "plain": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        spec = {**SPEC, "model": str(tiny_vision_model(tmp / "model", text=TEXT, vision=TOWER))}

        def side(key, fn):
            def run(tag):
                recs[key].append(fn(spec, tmp, f"{key}-{tag}"))
                return summary(recs[key][-1])["s_per_step"]
            return run

        measured = interleave(side("ours", ours), side("plain", plain), a.reps)
    r = ratio("image_sft_overhead_vs_trl", measured, TOLERANCE)
    o, pl = recs["ours"][0], recs["plain"][0]
    result = {**as_json([r]), "s_per_step": {"ours": statistics.median(x for x, _ in measured),
                                             "plain": statistics.median(y for _, y in measured)},
              "num_tokens": {"ours": num_tokens(o), "plain": num_tokens(pl)},
              "first_loss": {"ours": first_loss(o), "plain": first_loss(pl)}}
    if a.json:
        print(json.dumps(result, indent=2))
    day = time.strftime("%Y-%m-%d")
    body = (f"{day}, this machine (CPU, no GPU), `python bench/bench_images.py`: {a.reps} interleaved pairs, "
            f"{spec['steps']} steps of {spec['batch']} image rows each on a random ~23M-parameter Gemma 3 shaped "
            "model, the median step after the first.\n\n"
            "| ratio | median (lowest-highest pair) | s/step ours | s/step plain TRL | tokens ours / plain | loss at "
            "step 1 ours / plain |\n|---|---|---|---|---|---|\n"
            f"| image SFT step, qlora-app / TRL's SFTTrainer | {r.text()} | "
            f"{result['s_per_step']['ours']:.3f} | {result['s_per_step']['plain']:.3f} | "
            f"{result['num_tokens']['ours']} / {result['num_tokens']['plain']} | "
            f"{result['first_loss']['ours']} / {result['first_loss']['plain']} |\n")
    write_section("images bench", body)
    print(body)


if __name__ == "__main__":
    main()
