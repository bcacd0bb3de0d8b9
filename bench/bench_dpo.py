"""dpo: `qlora-app demo --method dpo` over seeds: pairs from the shaped reward, then DPO, on 2 CPU cores
(``--method kto``: the same demo with KTO on the pairs split into good and bad answers; its own `## kto` section).

    python bench/bench_dpo.py [--out DIR] [--seeds 1,2,3] [--quick-seeds 1,2,3] [--method kto]

Runs `run_dpo_demo` exactly as `qlora-app demo --method dpo --seed N` (and `--quick`) does, each seed in a fresh
folder (no pairs reused), and reads: pairs made, greedy held-out accuracy of base and adapter (the run's proof),
how often base and adapter find the chosen answer of a held-out pair more likely, the implicit reward margin, and the
time per phase.
A seed meets the issue's target (#34) when DPO lifts greedy held-out accuracy by at least 15 points in under
2 minutes. Rewrites the `## dpo` section of docs/performance.md. CPU, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
SEEDS = (1, 2, 3)
MIN_LIFT, MAX_SECONDS = 0.15, 120.0  # issue #34's target, per seed


def run_seed(seed: int, out: Path, quick: bool, method: str = "dpo") -> dict:
    from rich.console import Console

    from app.demo.dpo import run_dpo_demo

    if out.exists():  # the demo reuses complete pairs in its folder: a rerun into --out must not time that
        shutil.rmtree(out)
    t = time.time()
    result = run_dpo_demo(out, quick=quick, console=Console(file=open(os.devnull, "w")), progress=False, seed=seed,
                          method=method)
    demo, s, p = result.config["demo"], result.summary, result.preference
    pairs = json.loads((Path(demo["pairs"]) / ".qlora-pairs.json").read_text())["splits"]
    r = {"seed": seed, "pairs": pairs["train"]["pairs"], "prompts": pairs["train"]["done"],
         "base": s.base.accuracy, "dpo": s.adapter.accuracy, "lift": demo[f"{method}_lift"], "n": s.n,
         "pref_base": p["base_likelier"], "pref_dpo": p["adapter_likelier"], "pref_accuracy": p["accuracy"],
         "margin": p["margin"],
         "pref_n": p["n"], "seconds": time.time() - t,
         "timings": {**demo["timings"], "train_s": demo["timings"][f"{method}_s"]}}
    r["ok"] = r["lift"] >= MIN_LIFT and r["seconds"] <= MAX_SECONDS
    return r


def _mean_sd(xs: list[float], pct: bool = False) -> str:
    m, sd = statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{m:.1%} ± {sd:.1%}" if pct else f"{m:.3g} ± {sd:.2g}"


def table(results: list[dict], name: str = "DPO") -> str:
    target = name == "DPO"  # issue #34's target is DPO's
    rows = [f"| seed | pairs (of prompts) | base | after {name} | lift (points) | chosen more likely base → {name} | "
            f"margin | pairs s | {name} + proof s | total s |" + (" meets #34 |" if target else ""),
            "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|" + (":---:|" if target else "")]
    for r in results:
        tm = r["timings"]
        rows.append(f"| {r['seed']} | {r['pairs']} ({r['prompts']}) | {r['base']:.1%} | {r['dpo']:.1%} | "
                    f"{r['lift'] * 100:+.1f} | {r['pref_base']:.1%} → {r['pref_dpo']:.1%} | {r['margin']:+.3f} | "
                    f"{tm['pairs_s']:.0f} | {tm['train_s']:.0f} | {r['seconds']:.0f} |"
                    + (f" {'yes' if r['ok'] else '**no**'} |" if target else ""))
    col = {k: [r[k] for r in results] for k in ("base", "dpo", "lift", "pref_base", "pref_dpo", "margin", "seconds")}
    rows.append(f"| mean ± sd | | {_mean_sd(col['base'], True)} | {_mean_sd(col['dpo'], True)} | "
                f"{_mean_sd([x * 100 for x in col['lift']])} | {_mean_sd(col['pref_base'], True)} → "
                f"{_mean_sd(col['pref_dpo'], True)} | {_mean_sd(col['margin'])} | | | {_mean_sd(col['seconds'])} |"
                + (f" {sum(r['ok'] for r in results)}/{len(results)} |" if target else ""))
    return "\n".join(rows)


def main() -> None:
    from app.host.process import start_command

    start_command()  # a process entry, like `qlora-app`: the libraries' noise and the allocator (app/host)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--quick-seeds", default=",".join(map(str, SEEDS)), help="seeds of `--quick` ('' = none)")
    ap.add_argument("--method", default="dpo", choices=("dpo", "kto"))
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix=f"bench-{args.method}-"))
    runs: dict[bool, list[dict]] = {}
    for quick, seeds in ((False, args.seeds), (True, args.quick_seeds)):
        runs[quick] = []
        for seed in [int(x) for x in seeds.split(",") if x.strip()]:
            runs[quick].append(run_seed(seed, out / f"{'quick' if quick else 'full'}-{seed}", quick, args.method))
            print(json.dumps({k: v for k, v in runs[quick][-1].items() if k != "timings"}), flush=True)
    full = runs[False]
    if args.method == "kto":
        return kto_section(runs)
    from app.config.presets import load_preset
    from app.demo.dpo import PAIRS, QUICK

    preset = load_preset("demo-dpo")
    t = preset["training"]
    beta, loss = preset["dpo"]["beta"], ", ".join(preset["dpo"]["loss_type"])
    n, pref_n = (full[0]["n"], full[0]["pref_n"]) if full else ("?", "?")
    md = f"""`qlora-app demo --method dpo --seed N` on this machine ({os.cpu_count()} CPU cores, no GPU, offline),
measured by `python bench/run.py --only dpo` in one run, {time.strftime('%Y-%m-%d')}, each seed from scratch (no
pairs reused). Pairs: the shipped tiny base (0.73M-parameter Llama, 4-bit NF4) answers each of the 2,000 built-in
`arith` training prompts {PAIRS.samples} times at temperature {PAIRS.temperature:g} (at most {PAIRS.max_new_tokens}
tokens); the shaped reward scores the answers and the best and the worst make a pair where they differ by
{PAIRS.min_gap:g} or more. DPO (`presets/demo-dpo.yaml`): {t['max_steps']} steps of
{t['per_device_train_batch_size']} pairs, lr {t['learning_rate']:g}, beta {beta:g}, loss {loss}, the base (adapter
off) as the reference. Accuracy is greedy on all {n} held-out problems (the run's proof); "chosen more likely" is the
share of the {pref_n} held-out pairs whose chosen answer the model finds more likely (app.run.layout.PREFERENCE_WORDS);
the margin is DPO's implicit reward margin on them. Target (#34): a lift of at least +15 points, under 2 minutes.

{table(full) if full else '(no full-demo seeds run)'}
"""
    if runs[True]:
        md += f"""
`--quick` ({QUICK['max_prompts']} prompts, {QUICK['steps']} DPO steps, a proof on {QUICK['eval']} held-out
problems), same machine, same run:

{table(runs[True])}
"""
    md += """
What did not teach this model (measured while building it, issue #34): hand-made pairs (the right worked solution
vs the same with the wrong operation or an off-by-one result) left held-out accuracy at 20.5% -> 20.0% (lr 1e-4) and
collapsed it at lr 1e-3 (2.0%: chosen log-probabilities fall with the rejected ones, DPO's known failure). Pairs
from the model's own samples move probability between answers it actually gives.
"""
    write_section("dpo", md)
    print(md)


def kto_section(runs: dict[bool, list[dict]]) -> None:
    """docs/performance.md's `## kto`: the same demo, its pairs split into good and bad answers for KTO."""
    from app.config.presets import load_preset
    from app.demo.dpo import QUICK

    t = load_preset("demo-dpo")["training"]
    md = f"""`qlora-app demo --method kto --seed N` on this machine ({os.cpu_count()} CPU cores, no GPU, offline), measured
by `python bench/bench_dpo.py --method kto` in one run, {time.strftime('%Y-%m-%d')}, each seed from scratch: the DPO
demo's pairs (the shipped tiny base's own answers, the shaped reward's best and worst), each split into a good and a
bad answer, then KTO from the same 4-bit base ({t['max_steps']} steps of {t['per_device_train_batch_size']} rows, lr
{t['learning_rate']:g}, beta 0.1, the good answers' weight balanced by the counts; the base with the adapter off is
the reference). Accuracy is greedy on the held-out problems (the run's proof); "chosen more likely" reads the held-out
pairs as DPO's does. The same seeds' DPO figures are in `## dpo`.

{table(runs[False], "KTO") if runs[False] else '(no full-demo seeds run)'}
"""
    if runs[True]:
        md += f"""
`--quick` ({QUICK['max_prompts']} prompts, {QUICK['steps']} steps, a proof on {QUICK['eval']} held-out problems):

{table(runs[True], "KTO")}
"""
    write_section("kto", md)
    print(md)


if __name__ == "__main__":
    main()
