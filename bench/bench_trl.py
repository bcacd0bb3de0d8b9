"""trl: qlora-app against the library it sits on, and its own speed settings against TRL's defaults, in one run.

    python bench/bench_trl.py [--json]      (also through: python bench/run.py --json)

  overhead_vs_trl        s/optimizer step of `qlora-app train --method sft` / a hand-written TRL SFTTrainer script
                         (bench/plain_trl.py): same 4-bit model, rows, chat format, LoRA and hyperparameters,
                         alternated (ours, plain, ours, plain), best of each side; checked to train on the same
                         tokens (equal num_tokens) with the same loss at step 1.
  grpo_overhead_vs_trl   the same for GRPO with the shaped reward (same reward functions on both sides) and TRL's
                         default generation batch on both sides.
  sft_packing_speedup    tokens/s of qlora-app's SFT default (packing) / the same run with packing off (padding),
                         on the real GSM8K length mix; loss at equal tokens seen shown side by side.
  grpo_generation_speedup  completions/s of qlora-app's generation settings (auto: merged sampler, generation batch
                         of 64) / TRL's defaults (the 4-bit training model, one optimizer step's batch), on the demo
                         task (shipped model, demo recipe); reward curves side by side.
  grpo_step_shares       fractions of a GRPO step spent sampling, scoring rewards and in the rest (log-prob passes,
                         forward/backward, optimizer), from the instrumented default run.

Rows: ../shared/data/gsm8k_train.jsonl where present (real lengths), else built-in arith rows (then the packing
ratio is on arith's lengths and says so). Model: a random-weight Llama-shaped model (hidden 256, 4 layers) with a
BPE tokenizer trained on those rows; speed is real, accuracy meaningless. CPU, offline. Rewrites the `## trl`
section of docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from perfdoc import write_section  # noqa: E402
from ratio import TOLERANCE, Ratio, as_json, interleave, ratio, steadier  # noqa: E402
from steptimer import summary  # noqa: E402

GSM8K = ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"
REPS = 5  # interleaved pairs per ratio (bench/ratio.py judges the middle three)
# OMP_WAIT_POLICY=PASSIVE on both sides: OpenMP threads sleep while they wait instead of spinning, so a wait for a
# core a neighbour holds is not billed as CPU time (bench/ratio.py measures each ratio in CPU time too)
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_WAIT_POLICY": "PASSIVE"}


def rows(n: int) -> tuple[list[dict], str]:
    if GSM8K.is_file():
        with GSM8K.open() as f:
            return [json.loads(next(f)) for _ in range(n)], "GSM8K (../shared/data/gsm8k_train.jsonl)"
    from app.data.arith import generate_arith

    return [{"question": r["question"], "answer": r["answer"]} for r in generate_arith(n, seed=0)], "built-in arith"


def build_model(out: Path, texts: list[str]) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=4000, special_tokens=["<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>", bos_token="<|endoftext|>")
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = AutoConfig.for_model("llama", vocab_size=len(fast), hidden_size=256, intermediate_size=704,
                               num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                               max_position_embeddings=2048, tie_word_embeddings=False,
                               pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    return out


def _run(argv: list[str], timing: Path) -> dict:
    t = time.time()
    p = subprocess.run(argv, cwd=ROOT, env={**ENV, "BENCH_TIMING": str(timing)}, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"bench run failed ({p.returncode}): {' '.join(argv)}\n{p.stderr[-3000:]}")
    rec = json.loads(timing.read_text())
    rec["wall_s"] = time.time() - t
    return rec


def ours(spec: dict, tmp: Path, tag: str, extra: tuple[str, ...] = ()) -> dict:
    sets = [f"model.name_or_path={spec['model']}", f"data.dataset={spec['rows']}", "data.prompt_field=question",
            "data.reference_field=answer", "data.heldout_size=0", f"training.learning_rate={spec['lr']}",
            f"training.max_steps={spec['steps']}", f"training.per_device_train_batch_size={spec['batch']}",
            f"training.gradient_accumulation_steps={spec['accum']}", f"training.seed={spec['seed']}",
            f"training.gradient_checkpointing={str(spec['checkpointing']).lower()}", "training.logging_steps=1",
            "training.save_steps=100000", "training.warmup_steps=0", f"lora.r={spec['r']}",
            f"lora.alpha={spec['alpha']}", "model.attn_implementation=sdpa", "runtime.backend=hf",
            f"runtime.device={spec.get('device', 'cpu')}", f"training.max_length={spec['max_length']}",
            "model.compute_dtype=" + ("bf16" if spec.get("device") == "cuda" else "fp32")]
    if spec["method"] == "grpo":
        sets += [f"grpo.num_generations={spec['num_generations']}",
                 f"grpo.max_completion_length={spec['completion']}", "grpo.beta=0", "grpo.loss_type=dapo"]
        if spec.get("generation_batch_size"):
            sets.append(f"grpo.generation_batch_size={spec['generation_batch_size']}")
    argv = [sys.executable, str(HERE / "steptimer.py"), "--", "train", "--method", spec["method"], "--local-only",
            "--no-progress", "--output-dir", str(tmp / f"runs-{tag}")]
    for s in sets + list(extra):
        argv += ["--set", s]
    return _run(argv, tmp / f"{tag}.json")


def plain(spec: dict, tmp: Path, tag: str) -> dict:
    path = tmp / f"{tag}-spec.json"
    path.write_text(json.dumps({**spec, "out": str(tmp / f"plain-{tag}")}))
    return _run([sys.executable, str(HERE / "plain_trl.py"), str(path)], tmp / f"{tag}.json")


def first_loss(rec: dict) -> float | None:
    return next((r["loss"] for r in rec["logs"] if "loss" in r), None)


def tool_calls(rec: dict) -> float | None:
    """TRL's calls per completion, averaged over a run's logged steps (None: no tools)."""
    xs = [r["tools/call_frequency"] for r in rec["logs"] if "tools/call_frequency" in r]
    return statistics.mean(xs) if xs else None


def num_tokens(rec: dict) -> float | None:
    return max((r["num_tokens"] for r in rec["logs"] if "num_tokens" in r), default=None)


def overhead(name: str, spec: dict, tmp: Path, reps: int, tolerance: float,
             extra: tuple[str, ...] = ()) -> tuple[Ratio, dict]:
    """qlora-app's s/step over plain TRL's, from ``reps`` interleaved pairs (bench/ratio.py)."""
    recs: dict = {"ours": [], "plain": []}

    def side(key, fn):
        def run(tag):
            recs[key].append(fn(tag))
            return summary(recs[key][-1])
        return run

    both = interleave(side("ours", lambda t: ours(spec, tmp, f"{name}-ours-{t}", extra)),
                      side("plain", lambda t: plain(spec, tmp, f"{name}-plain-{t}")), reps)
    r, other = two_measures(name, both, "s_per_step", "cpu_s_per_step", tolerance,
                            wall_only=spec.get("device") == "cuda")
    measured = [(a["s_per_step"], b["s_per_step"]) for a, b in both]
    o, p = recs["ours"][0], recs["plain"][0]
    return r, {"other_measure": other,
               "s_per_step": {"ours": statistics.median(a for a, _ in measured),
                              "plain": statistics.median(b for _, b in measured)},
               "num_tokens": {"ours": num_tokens(o), "plain": num_tokens(p)},
               "first_loss": {"ours": first_loss(o), "plain": first_loss(p)},
               "tool_calls": {k: statistics.mean(c) if (c := [x for x in map(tool_calls, v) if x is not None])
                              else None for k, v in recs.items()},
               "runs": {k: [summary(x) for x in v] for k, v in recs.items()}}


def two_measures(name: str, both: list[tuple[dict, dict]], wall_key: str, cpu_key: str, tolerance: float,
                 invert: bool = False, wall_only: bool = False) -> tuple[Ratio, Ratio | None]:
    """(the reported ratio, the other measure's) of interleaved pairs of run summaries: the ratio of ``wall_key``
    and of ``cpu_key`` over the same pairs, the steadier reported (bench/ratio.steadier)."""
    wall = ratio(name, [(a[wall_key], b[wall_key]) for a, b in both], tolerance, invert)
    cpu = (ratio(name, [(a[cpu_key], b[cpu_key]) for a, b in both], tolerance, invert, measure="cpu")
           if all(a.get(cpu_key) and b.get(cpu_key) for a, b in both) else None)
    return steadier(wall, cpu, wall_only)


def example_lengths(model: Path, data: list[dict]) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return [len(tok(t)["input_ids"]) for t in (tok.apply_chat_template(
        [{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["answer"]}], tokenize=False)
        for r in data)]


def padding_ceiling(lengths: list[int], batch: int, seed: int) -> float:
    """Tokens a padded batch computes / real tokens, over random batches of these rows: the most that removing
    padding alone can buy (packing's speed-up on a compute-bound machine)."""
    import random

    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    batches = [[lengths[i] for i in order[k:k + batch]] for k in range(0, len(order), batch)]
    return sum(max(b) * len(b) for b in batches) / sum(sum(b) for b in batches)


def packing_flops(model: Path, lengths: list[int], per_row: int, row_tokens: float, seed: int) -> dict:
    """What a real token costs in multiply-adds (forward; backward scales both sides alike), padded batches of
    ``per_row`` examples against packed rows of ``row_tokens`` real tokens, split into the linear layers (every
    position: padding included) and attention's scores (QK^T and the weighted sum of V, per pair of positions).

    A packed row keeps its examples apart with a block-diagonal mask; on a CPU (sdpa, eager) attention is computed
    over the whole row and then masked, so a row of L tokens pays L^2 score pairs where its examples' own need only
    the sum of theirs. A variable-length kernel (flash-attention's varlen on a GPU) computes only the blocks."""
    import random

    cfg = json.loads((model / "config.json").read_text())
    d, inter, layers, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    kv = d * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) // cfg["num_attention_heads"]
    linear = layers * (2 * d * d + 2 * d * kv + 3 * d * inter) + d * vocab  # per position
    per_pair = layers * 2 * d  # per pair of positions that attend: q.k and the weighted v

    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    batches = [[lengths[i] for i in order[k:k + per_row]] for k in range(0, len(order), per_row)]
    real = sum(map(sum, batches))
    padded = {"linear": sum(max(b) * len(b) for b in batches) * linear / real,
              "attention": sum(len(b) * max(b) ** 2 for b in batches) * per_pair / real}
    mean = real / len(lengths)
    packed = {"linear": linear, "attention": row_tokens * per_pair,  # a row's L^2 pairs over its L real tokens
              "attention_varlen": sum(x * x for x in lengths) / real * per_pair}  # only each example's own blocks
    total = lambda side, key="attention": side["linear"] + side[key]  # noqa: E731
    return {"padded": padded, "packed": packed, "mean_example_tokens": mean, "row_tokens": row_tokens,
            "predicted_speedup": total(padded) / total(packed),
            "predicted_speedup_varlen": total(padded) / total(packed, "attention_varlen"),
            "attention_share_packed": packed["attention"] / total(packed),
            "attention_share_padded": padded["attention"] / total(padded)}


def tokens_per_s(rec: dict) -> dict:
    """{"wall": real tokens per second, "cpu": per CPU second} over the logged steps after the first."""
    logs = [r for r in rec["logs"] if "num_tokens" in r]
    steps, cpu = rec["steps"], rec.get("cpu") or []
    tokens = logs[-1]["num_tokens"] - logs[0]["num_tokens"]
    return {"wall": tokens / (steps[len(logs) - 1] - steps[0]),
            "cpu": tokens / (cpu[len(logs) - 1] - cpu[0]) if len(cpu) == len(steps) else None}


def loss_by_steps(rec: dict, windows: list[tuple[int, int]]) -> list[float | None]:
    """Mean training loss over each window of optimizer steps (a smoothed curve)."""
    logs = [r for r in rec["logs"] if "loss" in r]
    return [statistics.mean(sel) if (sel := [r["loss"] for r in logs if a <= r["step"] <= b]) else None
            for a, b in windows]


def reward_curve(rec: dict, chunks: int = 4) -> list[float]:
    vals = [r["reward"] for r in rec["logs"] if "reward" in r]
    size = max(1, len(vals) // chunks)
    return [statistics.mean(vals[i:i + size]) for i in range(0, size * chunks, size) if vals[i:i + size]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true", help="print one JSON object of the ratios")
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: both sides on the GPU in bf16 (the GPU machine; CI stays on cpu)")
    ap.add_argument("--model", type=Path, default=None,
                    help="an existing model folder (e.g. from ../shared/gpu/bench_model.py: real shapes) instead "
                         "of the small one built here")
    ap.add_argument("--reps", type=int, default=REPS, help="interleaved pairs per ratio")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help="widest spread of the pairs (relative to the median) for a ratio to be trusted")
    args = ap.parse_args()
    t_start = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    data, source = rows(400)
    (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    model = args.model or build_model(tmp / "model", [r["question"] + "\n" + r["answer"] for r in data])
    base = {"model": str(model), "rows": str(tmp / "rows.jsonl"), "seed": 42, "r": 16, "alpha": 32,
            "device": args.device,
            "checkpointing": False, "max_length": 1024}
    reps, tol = args.reps, args.tolerance

    sft = {**base, "method": "sft", "lr": 2e-4, "steps": 40, "batch": 4, "accum": 1}
    r_sft, res_sft = overhead("overhead_vs_trl", sft, tmp, reps, tol, ("training.packing=false",))
    system = "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
    grpo = {**base, "method": "grpo", "lr": 3e-5, "steps": 10, "batch": 8, "accum": 1, "num_generations": 4,
            "completion": 48, "system_prompt": system, "generation_batch_size": 8}
    # TRL's own sampling path on both sides
    r_grpo, res_grpo = overhead("grpo_overhead_vs_trl", grpo, tmp, reps, tol, ("grpo.sampler=plain",))

    # Packing: our default (one packed row per step) against padding with as many examples per step as a packed
    # row holds, so both sides take the same optimizer steps over the same amount of data.
    lengths = example_lengths(model, data)
    per_row = max(1, round(sft["max_length"] / statistics.mean(lengths)))
    pack: dict = {"packed": [], "padded": []}

    def pack_side(key, batch, on):
        def run(tag):
            pack[key].append(ours({**sft, "steps": 16, "batch": batch, "accum": 1}, tmp, f"pack-{key}-{tag}",
                                  (f"training.packing={on}",)))
            return tokens_per_s(pack[key][-1])
        return run

    pack_both = interleave(pack_side("packed", 1, "true"), pack_side("padded", per_row, "false"), reps)
    r_pack, pack_other = two_measures("sft_packing_speedup", pack_both, "wall", "cpu", tol,
                                      wall_only=args.device == "cuda")
    pack_m = [(a["wall"], b["wall"]) for a, b in pack_both]
    packed, padded = pack["packed"][0], pack["padded"][0]
    ceiling = padding_ceiling(lengths, per_row, sft["seed"])
    flops = packing_flops(model, lengths, per_row, num_tokens(packed) / 16, sft["seed"])  # real tokens per row
    windows = [(1, 4), (5, 8), (9, 12), (13, 16)]

    # Generation: the demo recipe with our auto sampling settings against TRL's defaults.
    demo_steps = 40
    gen: dict = {"auto": [], "trl-default": []}

    def gen_side(key, extra):
        def run(tag):
            argv = [sys.executable, str(HERE / "steptimer.py"), "--", "train", "--preset", "demo-grpo",
                    "--no-progress", "--output-dir", str(tmp / f"demo-{key}-{tag}"), "--max-steps", str(demo_steps),
                    "--set", "training.logging_steps=1", "--set", "training.save_steps=100000",
                    "--set", "training.eval_every=0"]
            for s in extra:
                argv += ["--set", s]
            gen[key].append(_run(argv, tmp / f"demo-{key}-{tag}.json"))
            return summary(gen[key][-1])
        return run

    gen_m = interleave(gen_side("auto", ()),
                       gen_side("trl-default", ("grpo.generation_batch_size=32", "grpo.sampler=plain")), reps)
    gpu = args.device == "cuda"
    r_gen, gen_other = two_measures("grpo_generation_speedup", gen_m, "completions_per_s", "completions_per_cpu_s",
                                    tol, wall_only=gpu)
    # A whole step here is the mean over the run: the auto side samples once every few steps
    # (steps_per_generation), so its step times alternate between two values and their median jumps between them.
    r_step, step_other = two_measures("grpo_step_speedup", gen_m, "mean_s_per_step", "cpu_mean_s_per_step", tol,
                                      invert=True, wall_only=gpu)
    shares = {k: statistics.median(a["shares"][k] for a, _ in gen_m) for k in gen_m[0][0]["shares"]}

    ratios = [r_sft, r_grpo, r_pack, r_gen, r_step]
    others = [res_sft["other_measure"], res_grpo["other_measure"], pack_other, gen_other, step_other]
    result = {
        **as_json(ratios),
        # the same pairs in the measure not reported (its median and middle-half spread): how far the two agree
        "other_measure": {r.name: {"measure": r.measure, "median": round(r.median, 3), "spread": round(r.spread, 3)}
                          for r in others if r is not None},
        "spread_of_middle_half": {r.name: round(r.spread, 3) for r in ratios},
        "grpo_step_shares": {k: round(v, 3) for k, v in shares.items()},
        "checks": {
            "sft_same_tokens": res_sft["num_tokens"]["ours"] == res_sft["num_tokens"]["plain"],
            "sft_same_first_loss": abs(res_sft["first_loss"]["ours"] - res_sft["first_loss"]["plain"]) < 1e-3,
            "grpo_same_first_loss": abs(res_grpo["first_loss"]["ours"] - res_grpo["first_loss"]["plain"]) < 1e-3,
        },
        "machine": {"cpu_cores": os.cpu_count(), "device": args.device, "load_avg_1m": _load(), **_gpu()},
        "seconds": round(time.time() - t_start, 1),
    }
    detail = {"ratios": {r.name: r for r in ratios}, "sft": res_sft, "grpo": res_grpo, "reps": reps, "packing": {
        "tokens_per_s": {"packed": statistics.median(a for a, _ in pack_m),
                         "padded": statistics.median(b for _, b in pack_m)}, "ceiling": ceiling, "flops": flops,
        "per_row": per_row, "windows": windows,
        "loss": {"packed": loss_by_steps(packed, windows), "padded": loss_by_steps(padded, windows)},
        "tokens": {"packed": num_tokens(packed), "padded": num_tokens(padded)}},
        "generation": {"auto": {"completions_per_s": statistics.median(a["completions_per_s"] for a, _ in gen_m),
                                "s_per_step": statistics.median(a["mean_s_per_step"] for a, _ in gen_m)},
                       "trl_default": {"completions_per_s": statistics.median(b["completions_per_s"] for _, b in gen_m),
                                       "s_per_step": statistics.median(b["mean_s_per_step"] for _, b in gen_m)},
                       "reward_curve": {"auto": reward_curve(gen["auto"][0]),
                                        "trl_default": reward_curve(gen["trl-default"][0])}},
        "source": source, "demo_steps": demo_steps}
    (tmp / "result.json").write_text(json.dumps({"result": result, "detail": detail}, indent=1, default=vars))
    if not args.no_doc:
        write_section("trl", _markdown(result, detail))
    if args.json:
        print(json.dumps(result))
    else:
        print(_markdown(result, detail))


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _gpu() -> dict:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__} if torch.cuda.is_available() else {}


def _fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def _markdown(r: dict, d: dict) -> str:
    s, g, p, gen, rr = d["sft"], d["grpo"], d["packing"], d["generation"], d["ratios"]
    loss_rows = "\n".join(f"| {w[0]}-{w[1]} | {_fmt(a)} | {_fmt(b)} |" for w, a, b in zip(
        p["windows"], p["loss"]["packed"], p["loss"]["padded"]))
    curve = lambda xs: " → ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    cell = lambda name, nd=3: rr[name].text(nd)  # noqa: E731
    flagged = [name for name in rr if not rr[name].trusted]
    others = "; ".join(f"`{k}` {v['median']:.3f} in {'CPU time' if v['measure'] == 'cpu' else 'wall clock'} "
                       f"(middle half {v['spread']:.0%} wide)" for k, v in (r.get("other_measure") or {}).items())
    f = p["flops"]
    verdict = (f"**Not trusted in this run: {', '.join(flagged)}** (the pairs disagree; see the table)."
               if flagged else f"Every ratio's pairs agreed within {next(iter(rr.values())).tolerance:.0%} of "
                               "its median.")
    return f"""Measured by `python bench/run.py --json` (bench/bench_trl.py) in one run on {time.strftime('%Y-%m-%d')},
{r['machine']['cpu_cores']} CPU cores (1-minute load average {r['machine'].get('load_avg_1m')} at the end), no GPU,
{r['seconds']:.0f} s in all. Rows: {d['source']}, 400 rows. Model: random-weight Llama shape (hidden 256, 4 layers,
4k BPE vocabulary trained on the rows) in 4-bit NF4 + LoRA r=16 on all linear layers, fp32 compute.

How to read it: every ratio comes from {d['reps']} interleaved pairs (A B, B A, ...: drift hits both sides alike),
one ratio per pair; the value is the median, in brackets the lowest and highest pair (bench/ratio.py). A run's
s/step is its median optimizer step after the first (which pays one-off warm-up). Each pair is measured twice, in
wall-clock time and in the CPU time the process spent (user + system, all threads; OpenMP threads sleep while they
wait on both sides): the wall clock is reported where its pairs agree, else the CPU time where those agree better
(named in brackets; bench/ratio.steadier says why not simply the steadier); the other: {others}.
{verdict}

| ratio | median (lowest-highest pair) | what |
|---|---|---|
| `overhead_vs_trl` | {cell('overhead_vs_trl')} | SFT s/step: qlora-app {s['s_per_step']['ours']:.3f} / plain TRL {s['s_per_step']['plain']:.3f} (medians; batch 4, 40 steps, packing off on both) |
| `grpo_overhead_vs_trl` | {cell('grpo_overhead_vs_trl')} | GRPO s/step: qlora-app {g['s_per_step']['ours']:.3f} / plain TRL {g['s_per_step']['plain']:.3f} (8 completions x 48 tokens, shaped reward on both) |
| `sft_packing_speedup` | {cell('sft_packing_speedup', 2)} | SFT tokens/s: one packed row of 1024 tokens per step {p['tokens_per_s']['packed']:.0f} / {p['per_row']} padded rows per step (as many examples as a packed row holds) {p['tokens_per_s']['padded']:.0f}; in such batches padding makes {p['ceiling']:.2f}x the real tokens |
| `grpo_generation_speedup` | {cell('grpo_generation_speedup', 2)} | completions/s sampling: qlora-app auto (merged sampler, 64 at once) {gen['auto']['completions_per_s']:.1f} / TRL defaults (4-bit model, 32 at once) {gen['trl_default']['completions_per_s']:.1f} (demo recipe) |
| `grpo_step_speedup` | {cell('grpo_step_speedup', 2)} | whole GRPO step on the demo recipe (mean over the run): TRL default {gen['trl_default']['s_per_step']:.3f} s / auto {gen['auto']['s_per_step']:.3f} s |

Same work on both sides: SFT num_tokens {s['num_tokens']['ours']:,.0f} (qlora-app) vs {s['num_tokens']['plain']:,.0f}
(plain TRL); loss at step 1 {_fmt(s['first_loss']['ours'], 4)} vs {_fmt(s['first_loss']['plain'], 4)}; GRPO loss at step 1
{g['first_loss']['ours']:.4g} vs {g['first_loss']['plain']:.4g}. Checks: {r['checks']}.

**Where a GRPO step goes** (`grpo_step_shares`, demo recipe with qlora-app's auto sampling): sampling
{r['grpo_step_shares']['generation']:.0%}, reward scoring {r['grpo_step_shares']['reward']:.0%}, the rest (log-prob
passes, forward/backward, optimizer) {r['grpo_step_shares']['train']:.0%}.

**Why packing gains {_fmt(rr['sft_packing_speedup'].median, 2)}x and not the {p['ceiling']:.2f}x of the padding it
removes** (multiply-adds per real token, forward, from the model's shape: `packing_flops`): the padded batches pay
{f['padded']['linear']:,.0f} in the linear layers (padding included) and {f['padded']['attention']:,.0f} in attention
({f['attention_share_padded']:.0%}: their examples are {f['mean_example_tokens']:.0f} tokens); a packed row of
{f['row_tokens']:.0f} real tokens pays {f['packed']['linear']:,.0f} and {f['packed']['attention']:,.0f}
({f['attention_share_packed']:.0%}), because on a CPU attention is computed over the whole row and then masked to
keep its examples apart. By the count alone packing would gain {f['predicted_speedup']:.2f}x (it measures
{_fmt(rr['sft_packing_speedup'].median, 2)}x: a count leaves out that one long row keeps the CPU's matrix kernels
busier than {p['per_row']} short ones), so what packing cannot win here is the row-wide attention, not padding or
its bookkeeping. A variable-length attention kernel (on a GPU,
flash-attention's varlen, which transformers uses for packed rows) computes only each example's own block
({f['packed']['attention_varlen']:,.0f} per token), which predicts {f['predicted_speedup_varlen']:.2f}x: on a GPU
packing's gain approaches the padding it removes; on this CPU the row-wide attention costs the rest.

**Packing learns the same** (training loss, mean over each window of optimizer steps; 16 steps, the same number of
examples per step on both sides; real tokens trained on: packed {p['tokens']['packed']:,.0f}, padded
{p['tokens']['padded']:,.0f}):

| steps | packed | padded |
|---:|---:|---:|
{loss_rows}

**Sampling this way learns the same on the demo task** (mean reward per quarter of {d['demo_steps']} steps,
seed 42): auto {curve(gen['reward_curve']['auto'])}; TRL default {curve(gen['reward_curve']['trl_default'])}. The
5-seed learning result with the auto batch is the `demo` section's.
"""


if __name__ == "__main__":
    main()
