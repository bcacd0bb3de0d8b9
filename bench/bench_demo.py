"""demo + GRPO step: the full offline demo (time per phase, accuracy) and the reward's share of a GRPO step.

    python bench/bench_demo.py [--out DIR] [--seeds 1,2,3,4,5] [--quick-seeds 1,2,3,4,5]

1. Runs `run_demo` exactly as `qlora-app demo --seed N` (and `--quick`) does, for each seed, and reads the
   accuracies after each phase, GRPO's reward curve, the held-out points during training and the time; a table per
   mode has one row per seed and the mean ± sd.
2. Re-runs the demo's GRPO phase for 20 steps with every reward function wrapped in a timer, so the reward time
   and the training wall time come from the same run: their ratio is the reward's share of a GRPO step.
Rewrites the `## demo` section of docs/performance.md. CPU, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder

from app.run import store

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


class Timed:
    """Wraps a reward function; keeps its __name__ so TRL logs it under the same component name."""

    total = 0.0

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *a, **kw):
        t = time.perf_counter()
        try:
            return self.fn(*a, **kw)
        finally:
            Timed.total += time.perf_counter() - t


def reward_share(out: Path) -> dict:
    import app.train.running.build as building
    from app.config.build import build_config
    from app.demo.recipe import grpo_preset
    from app.train.running.session import Session

    real = building.build_reward_funcs

    def timed_build(*args, **kwargs):
        funcs, weights = real(*args, **kwargs)
        return [Timed(f) for f in funcs], weights

    # the run's reward functions are made by app.train.running.build.run_rewards
    building.build_reward_funcs = timed_build
    try:
        cfg = build_config({**grpo_preset(), "output_dir": str(out), "run_name": "bench-grpo"},
                           sets=["training.max_steps=20", "logging_steps=1", "training.proof_rows=0",
                                 "training.eval_every=0"])
        Timed.total = 0.0
        t = time.perf_counter()
        d = Session(cfg, progress=False).run()
        wall = time.perf_counter() - t
    finally:
        building.build_reward_funcs = real
    steps = [m.get("step_time") for m in store.read_metrics(d) if m.get("step_time")]
    return {"reward_s": Timed.total, "train_wall_s": wall, "steps": 20,
            "trl_step_time_s": sum(steps) if steps else None}


SEEDS = (1, 2, 3, 4, 5)
# What issue #11 asks of every seed: GRPO's own lift, a rising reward, the time budget, the whole gain.
MIN_GRPO_LIFT, MIN_TOTAL_GAIN, MAX_SECONDS = 0.15, 0.20, 600


def _mean_sd(xs: list[float]) -> str:
    import statistics

    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def per_seed_table(results: list[dict]) -> str:
    rows = ["| seed | base (4-bit) | after GRPO | GRPO's lift (points) | held-out during training | "
            "reward first → last quarter | seconds | meets #11 |",
            "|---:|---:|---:|---:|---|---|---:|:---:|"]
    for r in results:
        rows.append(f"| {r['seed']} | {r['base']:.1%} | {r['grpo']:.1%} | {r['lift'] * 100:+.1f} | "
                    f"{r['eval_first']:.1%} → {r['eval_last']:.1%} | {r['r_first']:.3f} → {r['r_last']:.3f} | "
                    f"{r['seconds']:.0f} | {'yes' if r['ok'] else '**no**'} |")
    cols = {k: [r[k] for r in results] for k in ("base", "grpo", "lift", "eval_first", "eval_last", "r_first",
                                                 "r_last", "seconds")}
    rows.append(f"| mean ± sd | {_mean_sd(cols['base'])} | {_mean_sd(cols['grpo'])} | "
                f"{_mean_sd(cols['lift'])} | {_mean_sd(cols['eval_first'])} → {_mean_sd(cols['eval_last'])} | "
                f"{_mean_sd(cols['r_first'])} → {_mean_sd(cols['r_last'])} | "
                f"{_mean_sd(cols['seconds'])} | {sum(r['ok'] for r in results)}/{len(results)} |")
    return "\n".join(rows)


def run_seed(seed: int, out: Path, quick: bool = False) -> dict:
    from rich.console import Console

    from app.demo.run import run_demo
    from app.run import layout, store

    t = time.time()
    result = run_demo(out, quick=quick, console=Console(file=open(os.devnull, "w")), progress=False, seed=seed)
    demo = result.config["demo"]
    st, q = demo["stages"], demo["grpo_reward_quarters"]
    points = [r[layout.EVAL_ACCURACY] for r in store.read_metrics(Path(demo["grpo_run"]))
              if layout.EVAL_ACCURACY in r]
    r = {"seed": seed, "base": st["base"]["accuracy"], "grpo": st["grpo"]["accuracy"], "lift": demo["grpo_lift"],
         "r_first": q["first"], "r_last": q["last"], "seconds": time.time() - t, "timings": demo["timings"],
         "n": result.summary.n, "eval_first": points[0], "eval_last": points[-1],
         "eval_rows": (store.read_status(Path(demo["grpo_run"])) or {}).get(layout.EVAL_ROWS)}
    # the full demo claims a rising reward on every seed; --quick claims its held-out curve rises (its sampled
    # reward over 30 logged points is too noisy to claim a direction)
    rising = r["r_last"] > r["r_first"] if not quick else r["eval_last"] > r["eval_first"]
    r["ok"] = (r["lift"] >= MIN_GRPO_LIFT and rising and r["seconds"] <= MAX_SECONDS
               and r["grpo"] - r["base"] >= MIN_TOTAL_GAIN)
    return r


def main() -> None:
    from app.host.process import start_command

    start_command()  # a process entry, like `qlora-app`: the libraries' noise and the allocator (app/host)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated demo seeds")
    ap.add_argument("--quick-seeds", default=",".join(map(str, SEEDS)), help="seeds of `demo --quick` ('' = none)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-demo-"))
    runs = {}
    for quick, seeds in ((False, args.seeds), (True, args.quick_seeds)):
        runs[quick] = []
        for seed in [int(x) for x in seeds.split(",") if x.strip()]:
            runs[quick].append(run_seed(seed, out / f"{'quick' if quick else 'full'}-{seed}", quick))
            print(json.dumps({k: v for k, v in runs[quick][-1].items() if k != "timings"}), flush=True)
    results, first = runs[False], runs[False][0]
    share = reward_share(out)
    pct = 100 * share["reward_s"] / share["train_wall_s"]
    tm = first["timings"]
    quick_md = ""
    if runs[True]:
        q = runs[True]
        quick_md = f"""
`qlora-app demo --quick --seed N` (60 GRPO steps, a proof on {q[0]['n']} held-out problems), same machine, same run:

{per_seed_table(q)}

For --quick, "meets #11" asks for a rising held-out curve during training ({q[0]['eval_rows']} rows each point)
instead of a rising sampled reward: over its 30 logged points the sampled reward is too noisy to claim a direction
(it fell on some seeds while held-out accuracy rose).
"""
    md = f"""`qlora-app demo --seed N` on this machine ({os.cpu_count()} CPU cores, no GPU, offline), measured by
`python bench/run.py --only demo` in one run, {time.strftime('%Y-%m-%d')}: the tiny shipped base (0.73M-parameter
Llama) in 4-bit NF4 through bitsandbytes on CPU, GRPO alone from it (`presets/demo-grpo.yaml`: 200 steps, 4 prompts
x 8 generations per step, lr 1e-4; no SFT phase), then the run's own proof: greedy base vs adapter on all
{first['n']} held-out problems. Accuracy is held-out greedy accuracy; with no warm-up, GRPO's lift is the whole gain
(after GRPO − base); "held-out during training" is the run's evaluation points ({first['eval_rows']} rows each, first
→ last); the reward is GRPO's logged mean reward over the first and the last quarter of its logged steps.

{per_seed_table(results)}

Phases of seed {first['seed']} (seconds): model ready {tm['prepare_model_s']:.1f}, GRPO with its held-out points and
proof {tm['grpo_s']:.1f}, total {tm['total_s']:.1f} (budget {MAX_SECONDS}).
{quick_md}
**Reward share of a GRPO step**: the demo's GRPO phase re-run for {share['steps']} steps with every reward function
timed: {share['reward_s']:.2f} s of reward scoring in {share['train_wall_s']:.1f} s of training wall time =
**{pct:.1f}%** (target < 5%). Generation and the policy update dominate the step.
"""
    write_section("demo", md)
    print(md)


if __name__ == "__main__":
    main()
