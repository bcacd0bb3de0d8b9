"""judge: what a judge costs a GRPO step (the diagnosis is measured by bench/bench_diagnosis.py).

    python bench/bench_judge.py [--out DIR] [--reps 3] [--steps 12]

1. The demo's GRPO recipe (presets/demo-grpo.yaml, arith-base in 4-bit) for ``--steps`` steps three ways, interleaved
   (the order rotates each rep): the shaped reward alone; plus a local judge (the same tiny base loaded in 4-bit
   beside it); plus an endpoint judge (llama-cpp-python's OpenAI-compatible server on a GGUF `qlora-app export` made
   of the first run's adapter). Each run's step time is its logged wall clock from the first step to the last over
   the steps between (TRL's step_time leaves out the steps that sample);
   the ratios (judged / plain) are per rep, reported as the median and the range, with the judge's own counts.
Rewrites the `## judge and diagnosis` section of docs/performance.md (its diagnosis part is a pointer to
`## diagnosis`, which bench/bench_diagnosis.py writes). CPU, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder
from ratio import ratio  # noqa: E402

from app.run import layout, store

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def _run(out: Path, name: str, steps: int, judge: dict | None) -> Path:
    from app.config.build import build_config
    from app.config.presets import load_preset
    from app.train.running.session import Session

    preset = {**load_preset("demo-grpo"), "output_dir": str(out), "run_name": name}
    if judge:
        preset["reward"] = {**preset.get("reward", {}), "judge": judge}
    cfg = build_config(preset, sets=[f"max_steps={steps}", "logging_steps=1", "save_steps=1000",
                                     "training.eval_every=0", "training.proof_rows=8"])
    return Session(cfg, progress=False).run()


def _step_s(d: Path) -> float:
    """Seconds per optimizer step after the first (which also warms up): the run's logged wall clock."""
    at = {r["step"]: r["time"] for r in store.read_metrics(d) if "loss" in r and "time" in r}
    first, last = min(at), max(at)
    return (at[last] - at[first]) / (last - first)


def _serve(gguf: Path, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(240):
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.25)
    proc.terminate()
    raise RuntimeError(f"llama.cpp's server did not start: {log.read_text()[-1000:]}")


def judge_cost(out: Path, reps: int, steps: int) -> dict:
    first = _run(out, "export-source", steps, None)
    r = subprocess.run([sys.executable, "-m", "app.cli", "export", str(first), "--format", "gguf", "--outtype", "f32",
                        "--out", str(out / "gguf")], capture_output=True, text=True, env={**os.environ,
                                                                                      "PYTHONPATH": str(ROOT)})
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    server, url = _serve(next((out / "gguf").glob("*.gguf")), out / "server.log")
    try:
        sides = {"plain": None, "local": {"model": "arith-base"}, "endpoint": {"url": url}}
        times: dict[str, list[float]] = {k: [] for k in sides}
        counts: dict[str, dict] = {}
        for rep in range(reps):
            order = list(sides)[rep % 3:] + list(sides)[:rep % 3]
            for name in order:
                d = _run(out, f"{name}-{rep}", steps, sides[name])
                times[name].append(_step_s(d))
                counts[name] = (store.read_status(d) or {}).get(layout.JUDGE_COUNTS, {}).get("judge")
    finally:
        server.terminate()
    return {"times": times, "counts": counts,
            "local": ratio("local judge / plain", list(zip(times["local"], times["plain"]))),
            "endpoint": ratio("endpoint judge / plain", list(zip(times["endpoint"], times["plain"])))}


def main() -> None:
    from app.host.process import start_command

    start_command()  # a process entry, like `qlora-app`: the libraries' noise and the allocator (app/host)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-judge-"))
    cost = judge_cost(out / "cost", args.reps, args.steps)
    print(json.dumps({k: cost[k] for k in ("times", "counts")}), flush=True)

    def per_call(name):
        c = cost["counts"].get(name) or {}
        return (f"{c.get('calls', 0)} judgements, {c.get('failures', 0)} failed, "
                f"{c.get('mean_latency_ms') or 0:.1f} ms each")

    plain = statistics.median(cost["times"]["plain"])
    md = f"""Measured by `python bench/bench_judge.py` on this machine ({os.cpu_count()} CPU cores, no GPU, offline),
{time.strftime('%Y-%m-%d')}, in one run.

**What a judge costs a GRPO step.** The demo's recipe (arith-base in 4-bit, 32 completions a step, 40 tokens each)
for {args.steps} steps, three ways interleaved over {args.reps} reps: the shaped reward alone ({plain:.2f} s a step,
median; two optimizer steps per sampling), plus a local judge (arith-base itself, loaded in 4-bit beside the trained
copy, one forward pass per 8 completions), plus an endpoint judge (llama-cpp-python's OpenAI-compatible server on a
GGUF `qlora-app export` made of a run of the same recipe, one thread, 8 requests in flight, structured replies).
Ratios are a judged step's time over a plain one's, per rep:

| judge | step time / plain | judgements (last rep) |
|---|---|---|
| local model | {cost['local'].text(2)} | {per_call('local')} |
| llama.cpp endpoint | {cost['endpoint'].text(2)} | {per_call('endpoint')} |

A judge model as small as the trained one is the cheap end: a real judge costs what its forward passes (local) or
its server's replies (endpoint) cost, 32 judgements a step here, fewer where the cache hits (a repeated completion is
judged once).

**The diagnosis** (false alarms on healthy runs, runs built to fail) is measured by `bench/bench_diagnosis.py`: see
the `diagnosis` section.
"""
    write_section("judge and diagnosis", md)
    print(md)


if __name__ == "__main__":
    main()
