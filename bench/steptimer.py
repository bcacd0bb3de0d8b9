"""Bench-only instrumentation, installed the same way into both sides of a comparison (our CLI and a plain TRL
script): wall-clock time of every optimizer step, of GRPO's sampling and reward scoring, and every log row; and
beside each, the CPU time the process spent (user + system, over all its threads: ``time.process_time``), which a
busy neighbour on a shared machine slows far less than the wall clock (bench/ratio.py picks the steadier).
Written as JSON to $BENCH_TIMING at exit. Not part of the app.

    python bench/steptimer.py -- train --method sft ...     # runs `qlora-app train ...` instrumented
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

REC: dict = {"steps": [], "cpu": [], "logs": [], "generate": [], "generate_cpu": [], "reward": [], "reward_cpu": [],
             "completions": 0}


def _timed(cls, name: str, key: str, count=None) -> None:
    orig = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = orig(self, *args, **kwargs)
        REC[key].append((t0, time.perf_counter() - t0))
        REC[f"{key}_cpu"].append(time.process_time() - c0)
        if count:
            REC["completions"] += count(args, kwargs)
        return out

    setattr(cls, name, wrapper)


def install() -> None:
    import transformers
    import trl

    # GRPO's sampling (one call per generation batch, its prompts already repeated num_generations times)
    _timed(trl.GRPOTrainer, "_generate", "generate", count=lambda a, k: len(a[0] if a else k["prompts"]))
    _timed(trl.GRPOTrainer, "_calculate_rewards", "reward")

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            REC["steps"].append(time.perf_counter())
            REC["cpu"].append(time.process_time())

        def on_log(self, args, state, control, logs=None, **kw):
            REC["logs"].append({"step": state.global_step, **{k: v for k, v in (logs or {}).items()
                                                             if isinstance(v, (int, float))}})

    init = transformers.Trainer.__init__

    def with_clock(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.add_callback(Clock())

    transformers.Trainer.__init__ = with_clock
    prof = os.environ.get("BENCH_PROFILE")  # a cProfile of Trainer.train, to find where one side spends more
    if prof:
        import cProfile

        train = transformers.Trainer.train

        def profiled(self, *args, **kwargs):
            with cProfile.Profile() as p:
                out = train(self, *args, **kwargs)
            p.dump_stats(prof)
            return out

        transformers.Trainer.train = profiled
    out = os.environ.get("BENCH_TIMING")
    if out:
        atexit.register(lambda: open(out, "w").write(json.dumps(REC)))


def summary(rec: dict, skip: int = 1) -> dict:
    """Seconds per optimizer step after ``skip`` warm-up steps -- the median step (a burst of load on a shared
    machine that stalls a few steps moves a mean, not a median; the mean is kept as mean_s_per_step) -- and the
    shares of that window spent sampling and scoring rewards (the rest: log-prob passes, forward/backward,
    optimizer)."""
    import statistics

    steps = rec["steps"]
    if len(steps) <= skip + 1:
        raise RuntimeError(f"only {len(steps)} steps recorded")
    t0, t1 = steps[skip - 1] if skip else steps[0], steps[-1]
    n = len(steps) - (skip if skip else 1)
    window = t1 - t0
    first = skip - 1 if skip else 0
    durations = [b - a for a, b in zip(steps[first:], steps[first + 1:])]

    def inside(key):
        return sum(d for s, d in rec[key] if s >= t0 and s + d <= t1 + 1e-6)

    gen, rew = inside("generate"), inside("reward")
    done = [(s, d) for s, d in rec["generate"] if s >= t0 and s + d <= t1 + 1e-6]
    calls = max(1, len(rec["generate"]))
    per_call = rec["completions"] / calls
    out = {"s_per_step": statistics.median(durations), "mean_s_per_step": window / n, "steps": n,
           "window_s": window, "generation_s": gen, "reward_s": rew,
           "completions_per_s": (per_call * len(done) / gen) if gen else None,
           "shares": {"generation": gen / window, "reward": rew / window, "train": 1 - (gen + rew) / window}}
    cpu = rec.get("cpu") or []
    if len(cpu) == len(steps):  # the same steps in CPU seconds (a run timed before CPU time was recorded: none)
        spent = [b - a for a, b in zip(cpu[first:], cpu[first + 1:])]
        gen_cpu = sum(c for (s, d), c in zip(rec["generate"], rec.get("generate_cpu") or [])
                      if s >= t0 and s + d <= t1 + 1e-6)
        out.update({"cpu_s_per_step": statistics.median(spent), "cpu_mean_s_per_step": (cpu[-1] - cpu[first]) / n,
                    "completions_per_cpu_s": (per_call * len(done) / gen_cpu) if gen_cpu else None})
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    install()
    from app.cli.main import main

    sys.argv = ["qlora-app", *argv]
    sys.exit(main())
