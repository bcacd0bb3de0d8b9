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
from steptimer import summary  # noqa: E402

GSM8K = ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"
REPS = 3
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


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


def num_tokens(rec: dict) -> float | None:
    return max((r["num_tokens"] for r in rec["logs"] if "num_tokens" in r), default=None)


def overhead(spec: dict, tmp: Path, name: str, extra: tuple[str, ...] = ()) -> dict:
    sides = {"ours": [], "plain": []}
    for rep in range(REPS):  # alternated, so drift in the machine's speed hits both sides alike
        sides["ours"].append(ours(spec, tmp, f"{name}-ours-{rep}", extra))
        sides["plain"].append(plain(spec, tmp, f"{name}-plain-{rep}"))
    best = {k: min(summary(r)["s_per_step"] for r in v) for k, v in sides.items()}
    o, p = sides["ours"][0], sides["plain"][0]
    return {"ratio": best["ours"] / best["plain"], "s_per_step": best,
            "num_tokens": {"ours": num_tokens(o), "plain": num_tokens(p)},
            "first_loss": {"ours": first_loss(o), "plain": first_loss(p)},
            "runs": {k: [summary(r) for r in v] for k, v in sides.items()}}


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


def tokens_per_s(rec: dict) -> float:
    logs = [r for r in rec["logs"] if "num_tokens" in r]
    steps = rec["steps"]
    return (logs[-1]["num_tokens"] - logs[0]["num_tokens"]) / (steps[len(logs) - 1] - steps[0])


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
    args = ap.parse_args()
    t_start = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    data, source = rows(400)
    (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    model = args.model or build_model(tmp / "model", [r["question"] + "\n" + r["answer"] for r in data])
    base = {"model": str(model), "rows": str(tmp / "rows.jsonl"), "seed": 42, "r": 16, "alpha": 32,
            "device": args.device,
            "checkpointing": False, "max_length": 1024}

    sft = {**base, "method": "sft", "lr": 2e-4, "steps": 20, "batch": 4, "accum": 1}
    res_sft = overhead(sft, tmp, "sft", ("training.packing=false",))
    system = "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
    grpo = {**base, "method": "grpo", "lr": 3e-5, "steps": 10, "batch": 8, "accum": 1, "num_generations": 4,
            "completion": 48, "system_prompt": system, "generation_batch_size": 8}
    res_grpo = overhead(grpo, tmp, "grpo", ("grpo.sampler=plain",))  # TRL's own sampling path on both sides

    # Packing: our default (one packed row per step) against padding with as many examples per step as a packed
    # row holds, so both sides take the same optimizer steps over the same amount of data.
    lengths = example_lengths(model, data)
    per_row = max(1, round(sft["max_length"] / statistics.mean(lengths)))
    packed = ours({**sft, "steps": 16, "batch": 1, "accum": 1}, tmp, "pack-on", ("training.packing=true",))
    padded = ours({**sft, "steps": 16, "batch": per_row, "accum": 1}, tmp, "pack-off", ("training.packing=false",))
    pack_ratio = tokens_per_s(packed) / tokens_per_s(padded)
    ceiling = padding_ceiling(lengths, per_row, sft["seed"])
    windows = [(1, 4), (5, 8), (9, 12), (13, 16)]

    # Generation: the demo recipe with our auto sampling settings against TRL's defaults.
    demo_steps = 40
    gen = {}
    for tag, extra in (("auto", ()), ("trl-default", ("grpo.generation_batch_size=32", "grpo.sampler=plain"))):
        argv = [sys.executable, str(HERE / "steptimer.py"), "--", "train", "--preset", "demo-grpo", "--no-progress",
                "--output-dir", str(tmp / f"demo-{tag}"), "--max-steps", str(demo_steps), "--set",
                "training.logging_steps=1", "--set", "training.save_steps=100000"]
        for s in extra:
            argv += ["--set", s]
        gen[tag] = _run(argv, tmp / f"demo-{tag}.json")
    g_auto, g_def = summary(gen["auto"]), summary(gen["trl-default"])
    shares = g_auto["shares"]

    result = {
        "overhead_vs_trl": round(res_sft["ratio"], 3),
        "grpo_overhead_vs_trl": round(res_grpo["ratio"], 3),
        "sft_packing_speedup": round(pack_ratio, 3),
        "grpo_generation_speedup": round(g_auto["completions_per_s"] / g_def["completions_per_s"], 3),
        "grpo_step_speedup": round(g_def["s_per_step"] / g_auto["s_per_step"], 3),
        "grpo_step_shares": {k: round(v, 3) for k, v in shares.items()},
        "checks": {
            "sft_same_tokens": res_sft["num_tokens"]["ours"] == res_sft["num_tokens"]["plain"],
            "sft_same_first_loss": abs(res_sft["first_loss"]["ours"] - res_sft["first_loss"]["plain"]) < 1e-3,
            "grpo_same_first_loss": abs(res_grpo["first_loss"]["ours"] - res_grpo["first_loss"]["plain"]) < 1e-3,
        },
        "machine": {"cpu_cores": os.cpu_count(), "device": args.device, **_gpu()},
        "seconds": round(time.time() - t_start, 1),
    }
    detail = {"sft": res_sft, "grpo": res_grpo, "packing": {
        "tokens_per_s": {"packed": tokens_per_s(packed), "padded": tokens_per_s(padded)}, "ceiling": ceiling,
        "per_row": per_row, "windows": windows,
        "loss": {"packed": loss_by_steps(packed, windows), "padded": loss_by_steps(padded, windows)},
        "tokens": {"packed": num_tokens(packed), "padded": num_tokens(padded)}},
        "generation": {"auto": g_auto, "trl_default": g_def,
                       "reward_curve": {"auto": reward_curve(gen["auto"]), "trl_default": reward_curve(gen["trl-default"])}},
        "source": source, "demo_steps": demo_steps}
    (tmp / "result.json").write_text(json.dumps({"result": result, "detail": detail}, indent=1))
    if not args.no_doc:
        write_section("trl", _markdown(result, detail))
    if args.json:
        print(json.dumps(result))
    else:
        print(_markdown(result, detail))


def _gpu() -> dict:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__} if torch.cuda.is_available() else {}


def _fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def _markdown(r: dict, d: dict) -> str:
    s, g, p, gen = d["sft"], d["grpo"], d["packing"], d["generation"]
    loss_rows = "\n".join(f"| {w[0]}-{w[1]} | {_fmt(a)} | {_fmt(b)} |" for w, a, b in zip(
        p["windows"], p["loss"]["packed"], p["loss"]["padded"]))
    curve = lambda xs: " → ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    return f"""Measured by `python bench/run.py --json` (bench/bench_trl.py) in one run on {time.strftime('%Y-%m-%d')},
{r['machine']['cpu_cores']} CPU cores, no GPU, {r['seconds']:.0f} s in all. Rows: {d['source']}, 400 rows. Model:
random-weight Llama shape (hidden 256, 4 layers, 4k BPE vocabulary trained on the rows) in 4-bit NF4 + LoRA r=16
on all linear layers, fp32 compute. Each ratio is taken against its baseline in the same run; s/step is the mean
over the steps after the first (which pays one-off warm-up), best of three alternated runs per side.

| ratio | value | what |
|---|---:|---|
| `overhead_vs_trl` | **{r['overhead_vs_trl']:.3f}** | SFT s/step: qlora-app {s['s_per_step']['ours']:.3f} / plain TRL {s['s_per_step']['plain']:.3f} (batch 4, 20 steps, packing off on both) |
| `grpo_overhead_vs_trl` | **{r['grpo_overhead_vs_trl']:.3f}** | GRPO s/step: qlora-app {g['s_per_step']['ours']:.3f} / plain TRL {g['s_per_step']['plain']:.3f} (8 completions x 48 tokens, shaped reward on both) |
| `sft_packing_speedup` | **{r['sft_packing_speedup']:.2f}** | SFT tokens/s: one packed row of 1024 tokens per step {p['tokens_per_s']['packed']:.0f} / {p['per_row']} padded rows per step (as many examples as a packed row holds) {p['tokens_per_s']['padded']:.0f}; in such batches padding makes {p['ceiling']:.2f}x the real tokens |
| `grpo_generation_speedup` | **{r['grpo_generation_speedup']:.2f}** | completions/s sampling: qlora-app auto (merged sampler, 64 at once) {gen['auto']['completions_per_s']:.1f} / TRL defaults (4-bit model, 32 at once) {gen['trl_default']['completions_per_s']:.1f} (demo recipe) |
| `grpo_step_speedup` | {r['grpo_step_speedup']:.2f} | whole GRPO step on the demo recipe: TRL default {gen['trl_default']['s_per_step']:.3f} s / auto {gen['auto']['s_per_step']:.3f} s |

Same work on both sides: SFT num_tokens {s['num_tokens']['ours']:,.0f} (qlora-app) vs {s['num_tokens']['plain']:,.0f}
(plain TRL); loss at step 1 {_fmt(s['first_loss']['ours'], 4)} vs {_fmt(s['first_loss']['plain'], 4)}; GRPO loss at step 1
{g['first_loss']['ours']:.4g} vs {g['first_loss']['plain']:.4g}. Checks: {r['checks']}.

**Where a GRPO step goes** (`grpo_step_shares`, demo recipe with qlora-app's auto sampling): sampling
{r['grpo_step_shares']['generation']:.0%}, reward scoring {r['grpo_step_shares']['reward']:.0%}, the rest (log-prob
passes, forward/backward, optimizer) {r['grpo_step_shares']['train']:.0%}.

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
