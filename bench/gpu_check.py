"""One command for a lent GPU: the memory estimate against the measured peak, where a GRPO generation round's time
goes, a GRPO step against plain TRL, the demo's lift and the test suite, in one markdown table plus JSON.

    python bench/gpu_check.py --out DIR              on a CUDA machine: Qwen2.5 0.5B / 7B shapes (random weights)
    python bench/gpu_check.py --out DIR --quick      a tiny shape and few steps (what a CPU runs; CI tests it)
    ... --skip demo,suite,trl                        leave parts out
    ... --runs 0.5b:grpo,0.5b:grpo:1.5b              only these rows of the memory table (the last: with a judge)

A mixture of experts (``moe``): SFT on Qwen3-30B-A3B's layer shape with its experts quantized as they load, at two
depths (2 and 4 of its 48 layers; a CPU-sized MoE at 1 and 2 in the quick mode), each run's measured peak against its
own estimate; the two measured peaks give the cost of one layer, extrapolated linearly to the published depth and set
beside the plan of the 48-layer model itself; the deeper run again with 16-bit experts, for what the quantized load
saves (FULL only: in the quick mode it is the same path with another --set).

Writes DIR/gpu_check.json and DIR/gpu_check.md. Everything offline: the shapes are built by bench/shapes.py (a BPE
tokenizer trained on ../shared/data/gsm8k_train.jsonl, else on built-in arith rows), runs go through `qlora-app
train` itself (timed by bench/steptimer.py), and the plain-TRL side is bench/plain_trl.py. Without a GPU the
memory figures are the process's peak RSS, not comparable to the estimate (the table says so).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import bench_trl  # noqa: E402
import shapes  # noqa: E402
from steptimer import summary  # noqa: E402

# The table of issue #32: batch 8, accumulation 1, 8 generations of 256 tokens, LoRA r16, 4 steps; plus GRPO with a
# local judge model of another shape beside it (reward.judge.model: its weights and judging pass in the estimate).
# A run is (shape, method, judge shape or None).
FULL = {"runs": [("0.5b", "sft", None), ("7b", "sft", None), ("0.5b", "grpo", None), ("7b", "grpo", None),
                 ("0.5b", "grpo", "1.5b")], "steps": 4, "batch": 8,
        "generations": 8, "completion": 256, "probe": "7b", "decode": 64, "trl_shape": "0.5b", "trl_steps": 6,
        "moe": ("30b-a3b", (2, 4), True)}
QUICK_ROWS = 400  # of GSM8K: real lengths, a CPU's budget
QUICK = {"runs": [("tiny", "sft", None), ("tiny", "grpo", None), ("tiny", "grpo", "tiny")], "steps": 3, "batch": 4,
         "generations": 4, "completion": 16, "probe": "tiny", "decode": 8, "trl_shape": "tiny", "trl_steps": 3,
         "moe": ("moe-tiny", (1, 2), False)}  # no 16-bit row: the same path, another --set


def rows_file(tmp: Path, limit: int | None = None) -> Path:
    """GSM8K where it is beside the project (its first ``limit`` rows: the quick mode's runs read 400, not 7,473, a
    dry run's data pass included), else built-in arith rows (question / answer)."""
    if shapes.GSM8K.is_file():
        if limit is None:
            return shapes.GSM8K
        path = tmp / "gsm8k-head.jsonl"
        with shapes.GSM8K.open(encoding="utf-8") as f:
            path.write_text("".join(line for _, line in zip(range(limit), f)), encoding="utf-8")
        return path
    from app.data.arith import generate_arith

    path = tmp / "arith.jsonl"
    path.write_text("".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n"
                            for r in generate_arith(400, seed=0)))
    return path


def sets_for(mode: dict, method: str) -> list[str]:
    out = ["lora.r=16", "lora.alpha=32", f"per_device_train_batch_size={mode['batch']}",
           "gradient_accumulation_steps=1", "learning_rate=1e-5", "training.eval_every=0", "logging_steps=1",
           "training.save_steps=1000"]
    if method == "grpo":
        out += [f"grpo.num_generations={mode['generations']}", f"grpo.max_completion_length={mode['completion']}"]
    elif mode is QUICK:
        out.append("training.max_length=128")
    if mode is QUICK:  # a CPU's check of the harness: the held-out proof after training is not what it measures
        out.append("training.proof_rows=0")
    return out


def train_args(model: Path, rows: Path, method: str, mode: dict, out: Path, judge: Path | None = None,
               sets: tuple = ()) -> list[str]:
    args = ["train", "--dataset", str(rows), "--model", str(model), "--method", method, "--local-only",
            "--max-steps", str(mode["steps"]), "--output-dir", str(out)] + (["--judge-model", str(judge)] if judge
                                                                             else [])
    for s in [*sets_for(mode, method), *sets]:
        args += ["--set", s]
    return args


def dry_plan(args: list[str]) -> dict:
    """`qlora-app train ARGS --dry-run --json`: the plan of a run (no weights read), or why it was refused."""
    dry = subprocess.run([sys.executable, "-m", "app.cli", *args, "--dry-run", "--json"], capture_output=True,
                         text=True, cwd=ROOT, env=bench_trl.ENV)
    return json.loads(dry.stdout) if dry.returncode == 0 else {"refused": dry.stderr.strip()[-300:]}


def table_run(model: Path, rows: Path, method: str, mode: dict, out: Path, judge: Path | None = None,
              sets: tuple = (), dry: bool = True) -> dict:
    """The plan's estimate (dry run) and the run's measured peak and steady step time, through `qlora-app train`
    (``judge``: a local judge model in the reward; ``sets``: more --set; ``dry``: False takes the estimate the run
    recorded of its own plan, the same plan, without a dry run's process)."""
    args = train_args(model, rows, method, mode, out, judge, sets)
    plan = dry_plan(args) if dry else {}
    rec = bench_trl._run([sys.executable, str(HERE / "steptimer.py"), "--", *args, "--no-progress"],
                         out / "timing.json")
    from app.run import layout, lookup, store

    (run,) = lookup.list_runs(out)
    st = store.read_status(run) or {}
    plan = plan or dict(st.get("memory_estimate") or {})
    steady = summary(rec)["s_per_step"] if len(rec["steps"]) > 2 else None
    return {"method": method + (f" + judge {judge.name}" if judge else ""),
            "estimate_torch_peak_gb": plan.get("torch_peak_gb"),
            "estimate_total_gb": plan.get("total_gb"), "sampler": plan.get("sampler"),
            "measured_gib": st.get(layout.PEAK_RESERVED), "device": st.get(layout.PEAK_DEVICE),
            "ratio": (plan["torch_peak_gb"] / st[layout.PEAK_RESERVED]) if plan.get("torch_peak_gb") and
            st.get(layout.PEAK_RESERVED) else None, "wall_s": round(rec["wall_s"], 1), "steady_s_per_step": steady,
            "status": st.get("status")}


def moe_peak(rows: Path, mode: dict, out: Path) -> dict:
    """The MoE rows (module docstring): each depth's run with the experts NF4 as they load, the deeper one with 16-bit
    experts too, and the per-layer extrapolation to the published depth against the plan of the whole model."""
    name, depths, sixteen = mode["moe"]
    tok = out / "models" / "tokenizer"
    runs, nf4 = {}, {}
    for depth in depths:
        model = shapes.write_shape(out / "models" / f"{name}@{depth}", f"{name}@{depth}", tok, weights=True)
        for q in ("true", "false") if depth == depths[-1] and sixteen else ("true",):
            key = f"{name}@{depth}:sft:experts-{'nf4' if q == 'true' else '16bit'}"
            runs[key] = table_run(model, rows, "sft", mode, out / "runs" / key.replace(":", "-"),
                                  sets=(f"model.quantize_experts={q}",), dry=False)
            if q == "true":
                nf4[depth] = runs[key]
    layers = shapes.MOE_LAYERS[name]
    whole = shapes.write_shape(out / "models" / f"{name}@{layers}", f"{name}@{layers}", tok)  # config only
    plan = dry_plan(train_args(whole, rows, "sft", mode, out / "runs" / "whole", sets=("model.quantize_experts=true",)))
    (d1, r1), (d2, r2) = sorted(nf4.items())
    per_layer = {k: (r2[k] - r1[k]) / (d2 - d1) if r1.get(k) and r2.get(k) else None
                 for k in ("measured_gib", "estimate_torch_peak_gb")}
    at_depth = r2["measured_gib"] + per_layer["measured_gib"] * (layers - d2) if per_layer["measured_gib"] else None
    return {"runs": runs, "layers": layers, "measured_gib_per_layer": per_layer["measured_gib"],
            "estimate_gb_per_layer": per_layer["estimate_torch_peak_gb"], "measured_gib_extrapolated": at_depth,
            "plan_torch_peak_gb": plan.get("torch_peak_gb"), "device": r2.get("device"),
            "ratio": plan["torch_peak_gb"] / at_depth if at_depth and plan.get("torch_peak_gb") else None}


def generation_split(model: Path, rows: Path, mode: dict) -> dict:
    """A generation round of the merged sampler as the product builds it: the weight refresh (dequantize + LoRA
    merge into the 16-bit copy), the prefill and the per-token decode, for one optimizer step's completions."""
    import torch

    from app.config.build import build_config
    from app.data import build_splits
    from app.run.counts import RunCounts
    from app.train.planning.plan import make_plan
    from app.train.running.build import build_trainer, load_model, run_rewards

    cfg = build_config({"method": "grpo", "model": {"name_or_path": str(model)}, "data": {"dataset": str(rows)},
                        "output_dir": str(rows.parent)}, None, [*sets_for(mode, "grpo"), "runtime.local_only=true",
                                                                "grpo.sampler=merged"])
    train, _, det = build_splits(cfg.data, 0, local_only=True)
    plan = make_plan(cfg, train, det)
    counts = RunCounts()
    trainer = build_trainer(plan, load_model(plan), Path(rows.parent) / "probe", counts,
                            run_rewards(plan, True, counts))
    sampler = trainer.merged_sampler
    tok = trainer.processing_class
    prompts = [tok(tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True),
                   add_special_tokens=False)["input_ids"]
               for r in plan.train_ds.select(range(max(1, mode["batch"] // mode["generations"])))]
    prompts = (prompts * mode["batch"])[:mode["batch"]]
    cuda = torch.cuda.is_available()

    def timed(fn, repeats: int = 3):
        """The fastest of ``repeats`` runs: load from elsewhere on the machine only ever adds time, so the minimum
        is the closest to the work's own (one run each made decode - prefill negative on a busy 2-core machine)."""
        best = float("inf")
        for _ in range(repeats):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        return best

    gen = trainer.generation_config
    refresh = timed(lambda: sampler.sync())
    for new in (1, mode["decode"]):  # a warm-up of both lengths (compile on a GPU), then the timed pair
        gen.max_new_tokens = gen.min_new_tokens = new
        sampler.generate(prompts, gen, tok.pad_token_id, [-1])
    gen.max_new_tokens = gen.min_new_tokens = 1
    prefill = timed(lambda: sampler.generate(prompts, gen, tok.pad_token_id, [-1]))
    gen.max_new_tokens = gen.min_new_tokens = mode["decode"]
    whole = timed(lambda: sampler.generate(prompts, gen, tok.pad_token_id, [-1]))
    return {"sequences": len(prompts), "refresh_ms": refresh * 1e3, "prefill_ms": prefill * 1e3,
            "decode_ms_per_step": (whole - prefill) * 1e3 / (mode["decode"] - 1), "compiled": sampler.compile}


def versus_trl(model: Path, rows: Path, mode: dict, tmp: Path) -> dict:
    """Steady s/step of a GRPO run through qlora-app against a hand-written TRL script, same model and config."""
    import torch

    cuda = torch.cuda.is_available()
    spec = {"model": str(model), "rows": str(rows), "method": "grpo", "lr": 1e-5, "steps": mode["trl_steps"],
            "batch": mode["batch"], "accum": 1, "seed": 0, "checkpointing": True, "r": 16, "alpha": 32,
            "max_length": 512, "num_generations": mode["generations"], "completion": mode["completion"],
            "system_prompt": "Solve the problem step by step, briefly. End with a line of the form "
                             "'Final answer: <answer>'.", "device": "cuda" if cuda else "cpu"}
    ours, plain = bench_trl.ours(spec, tmp, "ours"), bench_trl.plain(spec, tmp, "plain")
    a, b = summary(ours)["s_per_step"], summary(plain)["s_per_step"]
    return {"ours_s_per_step": a, "plain_trl_s_per_step": b, "speedup": b / a if a else None}


def demo_lift(out: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--output-dir", str(out)],
                       capture_output=True, text=True, cwd=ROOT, env=bench_trl.ENV)
    if r.returncode:
        return {"error": r.stderr.strip()[-300:]}
    demo = json.loads((out / "compare.json").read_text())["config"]["demo"]
    return {"lift_points": round(demo["grpo_lift"] * 100, 1), "seconds": demo["timings"]["total_s"],
            "base": demo["stages"]["base"]["accuracy"], "adapter": demo["stages"]["grpo"]["accuracy"]}


def suite() -> dict:
    t = time.time()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "slow or not slow", "-p", "no:cacheprovider"],
                       capture_output=True, text=True, cwd=ROOT)
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", r.stdout))
    return {"failed_tests": re.findall(r"^FAILED (\S+)", r.stdout, re.M), **counts, "seconds": round(time.time() - t)}


def markdown(result: dict) -> str:
    lines = [f"## gpu check ({result['device']}, {result['date']}, {result['mode']})", "",
             "| shape | method | estimate torch peak GB | measured GiB | estimate / measured | steady s/step |",
             "|---|---|---|---|---|---|"]
    for shape, r in result["table"].items():
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") and r.get("device") == "cuda" else "(CPU: RSS, not comparable)"
        lines.append(f"| {shape.split(':')[0]} | {r['method']} | {_f(r['estimate_torch_peak_gb'])} | "
                     f"{_f(r['measured_gib'])} | {ratio} | {_f(r['steady_s_per_step'], 3)} |")
    m = result.get("moe")
    if m:
        lines += ["", "| MoE run | estimate torch peak GB | measured GiB | estimate / measured |", "|---|---|---|---|"]
        for name, r in m["runs"].items():
            lines.append(f"| {name} | {_f(r['estimate_torch_peak_gb'])} | {_f(r['measured_gib'])} | {_f(r['ratio'])} |")
        lines.append(f"one layer: {_f(m['measured_gib_per_layer'], 3)} GiB measured, "
                     f"{_f(m['estimate_gb_per_layer'], 3)} GB estimated; at the published {m['layers']} layers: {_f(m['measured_gib_extrapolated'])} GiB "
                     f"extrapolated vs the plan's {_f(m['plan_torch_peak_gb'])} GB (ratio {_f(m['ratio'])})"
                     + ("" if m.get("device") == "cuda" else " (CPU: RSS, not comparable)"))
    g = result.get("generation")
    if g:
        lines += ["", f"generation round ({g['sequences']} sequences, merged copy, compiled={g['compiled']}): weight "
                      f"refresh {g['refresh_ms']:.0f} ms, prefill {g['prefill_ms']:.0f} ms, decode "
                      f"{g['decode_ms_per_step']:.1f} ms per step"]
    if result.get("trl"):
        t = result["trl"]
        lines.append(f"GRPO step: qlora-app {t['ours_s_per_step']:.2f} s vs plain TRL "
                     f"{t['plain_trl_s_per_step']:.2f} s "
                     f"({t['speedup']:.2f}x)")
    if result.get("demo"):
        lines.append(f"demo --quick: {json.dumps(result['demo'])}")
    if result.get("suite"):
        s = result["suite"]
        lines.append(f"suite: {s.get('passed', 0)} passed, {s.get('failed', 0)} failed "
                     f"({', '.join(s['failed_tests']) or 'none'}), {s['seconds']} s")
    return "\n".join(lines) + "\n"


def _f(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    from app.host.process import start_command

    start_command()  # a process entry, like `qlora-app`: the libraries' noise and the allocator (app/host)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="a tiny shape and few steps (the default without CUDA)")
    ap.add_argument("--skip", default="", help="comma-separated: demo, suite, trl, generation, moe")
    ap.add_argument("--runs", default="", help="only these table runs, comma-separated as named in the table "
                                               "(0.5b:grpo, 0.5b:grpo:1.5b for the judged one, ...)")
    args = ap.parse_args(argv)
    only = {r.strip() for r in args.runs.split(",") if r.strip()}
    import torch

    cuda = torch.cuda.is_available()
    mode = QUICK if args.quick or not cuda else FULL
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    # the generation probe and the TRL comparison have models of their own, not built when they are skipped
    skip_models = {m for part, m in (("generation", mode["probe"]), ("trl", mode["trl_shape"])) if part in skip}
    args.out.mkdir(parents=True, exist_ok=True)
    rows = rows_file(args.out, QUICK_ROWS if mode is QUICK else None)
    wanted = [r for r in mode["runs"] if not only or ":".join(x for x in r if x) in only]
    models = {s: shapes.write_shape(args.out / "models" / s, s, args.out / "models" / "tokenizer", weights=True)
              for s in {x for r in wanted for x in r[::2] if x} | ({mode["probe"], mode["trl_shape"]} - skip_models)}
    result = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "date": time.strftime("%Y-%m-%d"),
              "mode": "quick" if mode is QUICK else "full", "table": {}}
    for shape, method, judge in wanted:
        name = ":".join(x for x in (shape, method, judge) if x)
        result["table"][name] = table_run(models[shape], rows, method, mode, args.out / "runs" / name.replace(":", "-"),
                                          models[judge] if judge else None)
    if "moe" not in skip:
        result["moe"] = moe_peak(rows, mode, args.out)
    if "generation" not in skip:
        result["generation"] = generation_split(models[mode["probe"]], rows, mode)
    if "trl" not in skip:
        result["trl"] = versus_trl(models[mode["trl_shape"]], rows, mode, args.out / "trl")
    if "demo" not in skip:
        result["demo"] = demo_lift(args.out / "demo")
    if "suite" not in skip:
        result["suite"] = suite()
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    (args.out / "gpu_check.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
