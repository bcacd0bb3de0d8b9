"""The diagnosis as a classifier: silent on healthy runs, right on runs built to fail.

    python bench/bench_diagnosis.py [--out DIR] [--seeds 1,2,3,4,5] [--only grpo,tools,dpo,kto,images,failures]
                                    [--table-only] [--modes quick,full] [--section diagnosis]

1. Collects: every demo (`qlora-app demo`, `--tools`, `--method dpo`, `--method kto`, `--images`), full and
   `--quick`, on each seed, and the
   runs built to fail (the demo's GRPO recipe made to show one signal each: a constant custom reward, a reference
   nothing can write, cut completions, a component that can be gamed, a frozen learning rate, groups sampled cold,
   a reward that pays length).
   Each run is the CLI a user types, in a process of its own; its metrics.jsonl, config.yaml, status.json and the
   demo's comparison are kept under DIR/<name>/.
2. Reads each kept run again with the diagnosis as it is now (`app.run.diagnosis.diagnose`, what `qlora-app doctor
   RUN` says), so a change to the checks is measured on the same runs without training them again (--table-only).
Rewrites the `## diagnosis` section (or the one --section names, so a measurement on new seeds sits beside it) of docs/performance.md: a false alarm is any finding on a healthy run, a miss
is a built failure whose kind was not said. CPU, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from statistics import fmean, pstdev

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder

DEMOS = {"grpo": [], "tools": ["--tools"], "dpo": ["--method", "dpo"], "kto": ["--method", "kto"],
         "images": ["--images"]}
CONSTANT_REWARD = "def always_one(completions, **kwargs):\n    return [1.0] * len(completions)\n"
# A reward that pays length alone (up to 400 characters): what a shaped reward that leaks length teaches.
LONGER_REWARD = ("def longer(completions, **kwargs):\n"
                 "    text = [c if isinstance(c, str) else c[-1]['content'] for c in completions]\n"
                 "    return [min(len(t) / 400, 1.0) for t in text]\n")
# The demo's GRPO recipe, shortened and logged every step, as the slow tests build it.
BUILT = ["--preset", "demo-grpo", "--max-steps", "30", "--set", "logging_steps=1", "--set", "save_steps=1000",
         "--set", "training.eval_every=0", "--set", "training.proof_rows=8",
         "--set", "per_device_train_batch_size=16", "--set", "num_generations=4"]
ONLY_REFERENCE = ["--set", "reward.weights.length=0", "--set", "reward.weights.format=0",
                  "--set", "reward.weights.boilerplate=0"]


def failures(work: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (the `train` arguments, the kind the diagnosis must say)."""
    (work / "constant_reward.py").write_text(CONSTANT_REWARD)
    (work / "longer_reward.py").write_text(LONGER_REWARD)
    zzz = work / "zzz.jsonl"
    if not zzz.exists():
        from app.data.loading import resolve_dataset

        rows = resolve_dataset("arith", None, True)["train"].select(range(400))
        zzz.write_text("".join(json.dumps({"question": r["question"], "answer": "zzz"}) + "\n" for r in rows))
    return {
        "constant": ([*ONLY_REFERENCE, "--set", "reward.weights.reference=0", "--set",
                      f"reward.custom={work / 'constant_reward.py'}:always_one"], "constant"),
        "unreachable": ([*ONLY_REFERENCE, "--dataset", str(zzz)], "unreachable"),
        "truncated": (["--set", "max_completion_length=6"], "truncated"),
        "gamed": ([*ONLY_REFERENCE, "--dataset", str(zzz), "--max-steps", "40", "--set", "learning_rate=1e-3",
                   "--set", "reward.regex=\\+"], "gamed"),
        "frozen": (["--set", "learning_rate=1e-9"], "frozen"),
        "cold_groups": (["--set", "grpo.temperature=0.05"], "flat_groups"),
        # the tiny base ends its answers early: a high rate over 100 steps lets the paid length show (11 -> 40 tokens)
        "paid_length": ([*ONLY_REFERENCE, "--dataset", str(zzz), "--max-steps", "100", "--set", "learning_rate=5e-3",
                         "--set", f"reward.custom={work / 'longer_reward.py'}:longer"], "length_drift"),
    }


def _cli(args: list[str], cwd: Path) -> tuple[int, float, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=env, cwd=cwd)
    return p.returncode, time.time() - t, (p.stdout + p.stderr)[-3000:]


def _keep(run_root: Path, dest: Path, seconds: float, extra: dict) -> None:
    """The files the table reads: the training run (the folder with metrics.jsonl) and the demo's comparison."""
    dest.mkdir(parents=True, exist_ok=True)
    runs = sorted(p.parent for p in run_root.rglob("metrics.jsonl"))
    run = runs[-1]
    for name in ("metrics.jsonl", "config.yaml", "status.json"):
        if (run / name).exists():
            shutil.copy(run / name, dest / name)
    for j in run_root.glob("compare*.json"):
        shutil.copy(j, dest / "compare.json")
    (dest / "bench.json").write_text(json.dumps({"seconds": round(seconds, 1), **extra}))


def collect(out: Path, seeds: list[int], only: set[str], modes: set[str] = frozenset({"quick", "full"})) -> None:
    work = Path(tempfile.mkdtemp(prefix="diag-"))
    jobs = []
    if "failures" in only:
        for name, (args, kind) in failures(work).items():
            jobs.append((f"built-{name}", ["train", *BUILT, *args, "--set", f"run_name={name}", "--no-progress"],
                         {"expect": kind}))
    for demo, flags in DEMOS.items():
        if demo in only:
            for quick in [q for q in (True, False) if ("quick" if q else "full") in modes]:
                for seed in seeds:
                    name = f"{demo}-{'quick' if quick else 'full'}-{seed}"
                    jobs.append((name, ["demo", *flags, "--seed", str(seed), *(["--quick"] if quick else [])],
                                 {"demo": demo, "quick": quick, "seed": seed}))
    for name, args, extra in jobs:
        if (out / name / "bench.json").exists():
            continue  # kept from an earlier collection
        root = work / name
        root.mkdir(parents=True)
        args = [*args, "--output-dir", str(root)]
        rc, seconds, said = _cli(args, root)
        print(f"{name}: exit {rc}, {seconds:.0f} s", flush=True)
        if rc != 0:
            print(said, flush=True)
            continue
        _keep(root, out / name, seconds, extra)
    shutil.rmtree(work, ignore_errors=True)


def _lift(d: Path) -> float | None:
    p = d / "compare.json"
    if not p.exists():
        return None
    s = json.loads(p.read_text())["summary"]
    return 100 * (s["adapter"]["accuracy"] - s["base"]["accuracy"])


def read_again(d: Path) -> tuple[list[str], int, list[str]]:
    """What the diagnosis says of a kept run now, the training steps it read, what the run said live."""
    from app.config.build import load_yaml_file, validate
    from app.run import layout, store
    from app.run.diagnosis import Facts, diagnose, step_lines, steps_of
    from app.run.watch import standing

    records = store.read_metrics(d)
    found = diagnose(records, Facts.of(validate(load_yaml_file(d / layout.CONFIG))))
    # what the run said live and still held at its end (a warning its learning contradicted is withdrawn: watch.py)
    live = [x["kind"] for x in standing((store.read_status(d) or {}).get(layout.DIAGNOSIS))]
    return [f.kind for f in found], steps_of(step_lines(records)), live


def store_status(d: Path) -> dict:
    from app.run import store

    return store.read_status(d) or {}


def table(out: Path) -> str:
    healthy, built = [], []
    for d in sorted(p for p in out.iterdir() if (p / "bench.json").exists()):
        meta = json.loads((d / "bench.json").read_text())
        said, steps, live = read_again(d)
        (built if "expect" in meta else healthy).append((d.name, meta, said, steps, live, _lift(d)))
    alarms = sum(bool(r[2]) for r in healthy)
    withdrawn = sum(1 for r in healthy for x in (store_status(out / r[0]).get("diagnosis") or []) if x.get("withdrawn"))
    seeds = ", ".join(str(x) for x in sorted({r[1]["seed"] for r in healthy}))
    demos = ", ".join(sorted({r[1]["demo"] for r in healthy}))
    modes = " and ".join(sorted({"`--quick`" if r[1]["quick"] else "full" for r in healthy}))
    lines = [f"Measured by `python bench/bench_diagnosis.py` on this machine (2 CPU cores, no GPU, offline), "
             f"{date.today().isoformat()}. Each run is the command a user types; the kept metrics are read again by "
             "the diagnosis as it is now (what `qlora-app doctor RUN` says; checks count training steps, a logged "
             "line standing for the steps since the one before).", "",
             f"**Healthy runs** (demos {demos}; {modes}; seeds {seeds}): "
             f"**{alarms} false alarms in {len(healthy)} runs**; {withdrawn} warning(s) said live and withdrawn "
             "when the run's learning contradicted them.", "",
             "| demo | mode | runs | steps each | said | lift, points (mean ± sd) |", "|---|---|---:|---:|---|---:|"]
    groups: dict[tuple, list] = {}
    for r in healthy:
        groups.setdefault((r[1]["demo"], "quick" if r[1]["quick"] else "full"), []).append(r)
    for (demo, mode), rows in groups.items():
        said = "; ".join(f"seed {r[1]['seed']}: {', '.join(r[2])}" for r in rows if r[2]) or "nothing"
        held = "; ".join(f"seed {r[1]['seed']}: {', '.join(r[4])}" for r in rows if r[4])
        said += f" (standing at the run's end, said live: {held})" if held else ""
        lifts = [r[5] for r in rows if r[5] is not None]
        lift = f"{fmean(lifts):+.1f} ± {pstdev(lifts):.1f}" if lifts else "-"
        lines.append(f"| {demo} | {mode} | {len(rows)} | {rows[0][3]} | {said} | {lift} |")
    if not built:
        return "\n".join(lines)
    caught = sum(r[1]["expect"] in r[2] for r in built)
    lines += ["", f"**Runs built to fail** (the demo's GRPO recipe, 30-100 steps logged every step, one fault each): "
              f"**{caught} of {len(built)} caught**.", "", "| run | must say | said |", "|---|---|---|"]
    for name, meta, said, *_ in built:
        lines.append(f"| {name.removeprefix('built-')} | {meta['expect']} | {', '.join(said) or 'nothing'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "qlora-diagnosis-runs")
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--only", default="grpo,tools,dpo,kto,images,failures")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--modes", default="quick,full", help="the demos' modes to collect: quick, full or both")
    ap.add_argument("--section", default="diagnosis", help="the section of docs/performance.md to write")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.table_only:
        collect(a.out, [int(s) for s in a.seeds.split(",")], set(a.only.split(",")), set(a.modes.split(",")))
    body = table(a.out)
    print(body)
    print(write_section(a.section, body))


if __name__ == "__main__":
    main()
