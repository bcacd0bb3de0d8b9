"""Will this run fit my GPU? A back-of-the-envelope estimate of peak GPU memory for a config.

The terms, all in bytes:
  - base weights: linear layers in 4-bit NF4 = 0.5 byte/param plus the quantization constants (one fp32 absmax per
    64 weights = 1/16 byte/param; double quantization squeezes that to about 1/64). Embeddings and the LM head are
    not quantized by bitsandbytes and stay in 16-bit.
  - LoRA: r x (in + out) params per adapted matrix, kept in fp32, plus fp32 gradients and two Adam moments
    (8-bit paged AdamW on a GPU: 10 bytes/param; fp32 AdamW on CPU: 16).
  - training activations for one micro-batch: with gradient checkpointing only each layer's input is kept (plus one
    layer being recomputed); without it every layer keeps its intermediate tensors (Korthikanti et al.'s ~34
    bytes/token/hidden-unit at 16-bit, with the MLP part scaled to the real intermediate size). The fp32 logits
    over the vocabulary are never built whole: TRL scores tokens through a fused LM head, one tile at a time. Tokens
    per micro-batch come from the data's real lengths when known (padded: ~95th percentile; packed: full rows).
  - GRPO generation: a KV cache for every completion generated at once, and that phase does not overlap the
    backward pass, so the peak is the larger of the two phases.
  - a fixed CUDA context / allocator overhead.

The parameter count and shape come from the model's config.json when it is a local folder or already in the HF
cache (no network), else from the size in the hub id ("1.5B", "7B", "500M") with the nearest typical shape.
It is an estimate (+-20 %), meant to catch "this cannot fit" before a 20 minute download, not to replace a try.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from app.batching import steps_per_generation

GB = 1024**3
GPU_SIZES_GB = (8, 12, 24)
CUDA_CONTEXT_GB = 0.6  # CUDA context + cuBLAS workspace + allocator slack on a fresh process
FRAGMENTATION = 1.10  # the caching allocator rarely packs perfectly
GRPO_PROMPT_TOKENS = 256  # a typical chat-templated GSM8K prompt; the config does not bound prompt length
LOGIT_TILE_TOKENS, LOGIT_TILE_VOCAB = 4096, 32768  # TRL's fused LM head tile (trl/kernels/chunked_logprob.py)
FIT_MARGIN = 0.90  # above 90 % of the card is "tight": other processes and spikes need room

# (billions of params, hidden, intermediate, layers, heads, kv_heads, vocab, tied): typical Qwen2.5-style shapes,
# used only when the model's own config.json is not available.
TYPICAL_SHAPES = [
    (0.5, 896, 4864, 24, 14, 2, 151936, True),
    (1.5, 1536, 8960, 28, 12, 2, 151936, True),
    (3.0, 2048, 11008, 36, 16, 2, 151936, True),
    (7.0, 3584, 18944, 28, 28, 4, 152064, False),
    (8.0, 4096, 14336, 32, 32, 8, 128256, False),
    (14.0, 5120, 13824, 48, 40, 8, 152064, False),
    (32.0, 5120, 27648, 64, 40, 8, 152064, False),
    (70.0, 8192, 28672, 80, 64, 8, 128256, False),
]
_SIZE_RE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BbMm])(?![A-Za-z])")


def params_from_name(name: str) -> int | None:
    """'Qwen/Qwen2.5-1.5B-Instruct' -> 1_500_000_000; 'SmolLM2-360M' -> 360_000_000; no size -> None.
    The last size in the name wins ('Qwen2.5-7B' has '2.5' too, but not followed by B/M)."""
    hits = _SIZE_RE.findall(str(name).split("/")[-1])
    if not hits:
        return None
    num, unit = hits[-1]
    return int(float(num) * (1e9 if unit.lower() == "b" else 1e6))


# Families whose MLP is two matrices (up, down) rather than the gated three of Llama / Qwen / Mistral / Gemma.
UNGATED_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "falcon", "bloom", "phi", "starcoder2", "gpt_bigcode", "codegen"}
# Older families name the same facts differently (GPT-2 / GPT-J / BLOOM / Falcon / OPT); the first name present wins.
CONFIG_ALIASES = {"hidden_size": ("n_embd", "d_model"), "num_hidden_layers": ("n_layer", "num_layers"),
                  "num_attention_heads": ("n_head",), "intermediate_size": ("n_inner", "ffn_dim")}


def _shape_from_config(c: dict) -> dict | None:
    c = c.get("text_config", c)  # multimodal wrappers keep the LM under text_config
    c = {**{key: next((c[a] for a in aliases if c.get(a) is not None), None) for key, aliases in
            CONFIG_ALIASES.items()}, **{k: v for k, v in c.items() if v is not None}}
    try:
        h, layers, vocab = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(c.get("num_attention_heads") or max(1, h // 128))
    return {
        "hidden": h, "intermediate": int(c.get("intermediate_size") or 4 * h), "layers": layers, "heads": heads,
        "kv_heads": int(c.get("num_key_value_heads") or heads), "head_dim": int(c.get("head_dim") or h // heads),
        "vocab": vocab, "tied": bool(c.get("tie_word_embeddings", False)),
        "gated": c.get("model_type") not in UNGATED_MLP,
    }


def _shape_from_size(params: int) -> dict:
    b = params / 1e9
    row = min(TYPICAL_SHAPES, key=lambda s: abs(math.log(s[0] / max(b, 1e-3))))
    _, h, inter, layers, heads, kv, vocab, tied = row
    return {"hidden": h, "intermediate": inter, "layers": layers, "heads": heads, "kv_heads": kv,
            "head_dim": h // heads, "vocab": vocab, "tied": tied}


def _local_config(name_or_path: str) -> dict | None:
    """config.json of a local folder, or of a hub model already in the HF cache (never downloads)."""
    p = Path(name_or_path).expanduser()
    cand = p / "config.json" if p.is_dir() else None
    if cand is None and "/" in name_or_path and not p.exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(name_or_path, "config.json")
            cand = Path(hit) if isinstance(hit, str) else None
        except Exception:  # noqa: BLE001 - a bad id or cache layout just means "unknown"
            cand = None
    if cand is None or not cand.is_file():
        return None
    try:
        return json.loads(cand.read_text())
    except (OSError, ValueError):
        return None


def model_shape(name_or_path: str) -> tuple[dict | None, int | None, str]:
    """(shape, total params, where it came from)."""
    cfg = _local_config(name_or_path)
    shape = _shape_from_config(cfg) if cfg else None
    if shape:
        return shape, _count_params(shape), "config.json"
    n = params_from_name(name_or_path)
    if n:
        shape = _shape_from_size(n)
        return shape, n, "model name"
    return None, None, "unknown"


def _linear_sizes(s: dict) -> list[tuple[int, int]]:
    """(in, out) of each linear layer in one decoder block (attention q/k/v/o + the MLP, gated or not)."""
    h, i, q, kv = s["hidden"], s["intermediate"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    mlp = [(h, i), (h, i), (i, h)] if s.get("gated", True) else [(h, i), (i, h)]
    return [(h, q), (h, kv), (h, kv), (q, h), *mlp]


def _embed_params(s: dict) -> int:
    """Input embeddings plus the LM head (one matrix when tied): never quantized by bitsandbytes."""
    return s["vocab"] * s["hidden"] * (1 if s["tied"] else 2)


def _count_params(s: dict) -> int:
    return s["layers"] * sum(a * b for a, b in _linear_sizes(s)) + _embed_params(s)


def weight_bytes(s: dict, params: int, load_in_4bit: bool, double_quant: bool, dense_bytes: int = 2) -> float:
    """Bytes of the base weights: 4-bit linear layers (0.5 byte/weight + absmax constants) and dense embeddings /
    LM head at ``dense_bytes`` (2 on a GPU in bf16/fp16, 4 on a CPU in fp32)."""
    embed = _embed_params(s)
    linear = max(params - embed, 0)
    if not load_in_4bit:
        return params * dense_bytes
    quant_consts = 1 / 64 + 4 / (64 * 256) if double_quant else 4 / 64  # 8-bit absmax + fp32 per 256 blocks
    return linear * (0.5 + quant_consts) + embed * dense_bytes


def lora_param_count(s: dict, r: int, target_modules) -> int:
    n = r * s["layers"] * sum(a + b for a, b in _linear_sizes(s))
    if target_modules != "all-linear" and isinstance(target_modules, list):
        n = int(n * min(1.0, len(target_modules) / 7))
    return n


def lora_bytes_per_param(cuda: bool) -> int:
    """fp32 weight + fp32 grad + Adam's two moments: 8-bit paged AdamW on a GPU (2 bytes), fp32 AdamW on CPU (8)."""
    return 4 + 4 + (2 if cuda else 8)


def batch_tokens(lengths: list[int] | None, batch: int, max_length: int, packed: bool) -> int:
    """Tokens in one micro-batch. Packed rows are full (max_length each, as far as the data reaches); padded rows
    are as long as the longest of ``batch`` random rows, about the data's 95th percentile (max_length when the
    lengths are unknown)."""
    if not lengths:
        return batch * max_length
    if packed:
        return min(batch * max_length, sum(min(n, max_length) for n in lengths))
    ordered = sorted(lengths)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return batch * min(max_length, p95)


def estimate_memory(cfg, lengths: list[int] | None = None, cuda: bool = True, packed: bool | None = None,
                    weight_copy: str | None = None) -> dict:
    """Peak GPU memory for a *resolved* AppConfig (app.config.resolve). ``lengths``: token lengths of the training
    rows (SFT: whole examples; GRPO: prompts) when the data is at hand; ``packed``: whether SFT packs (default: the
    config's auto); ``weight_copy``: who samples from a 16-bit copy of the weights:
    "vllm" (all weights), "merged" (the linear layers; app/train/sampler.py shares the rest) or "none" (default:
    from grpo.use_vllm / grpo.sampler). Returns GB figures, a verdict per
    card size and a one-line summary; ``total_gb`` is None when
    the model size cannot be told."""
    shape, params, source = model_shape(cfg.model.name_or_path or "")
    out: dict = {"model": cfg.model.name_or_path, "params": params, "params_source": source,
                 "verdicts": {}, "total_gb": None}
    if shape is None or not params:
        out["summary"] = ("model size unknown: use a local folder with config.json or a hub id with the size in it "
                          "(e.g. ...-1.5B-...)")
        out["verdicts"] = {g: "unknown" for g in GPU_SIZES_GB}
        return out
    s = shape
    weights = weight_bytes(s, params, cfg.model.load_in_4bit, cfg.model.double_quant)
    lora_params = lora_param_count(s, cfg.lora.r or 16, cfg.lora.target_modules)
    lora = lora_params * lora_bytes_per_param(cuda)

    t = cfg.training
    batch = t.per_device_train_batch_size or 1
    if cfg.method == "grpo":
        completion = cfg.grpo.max_completion_length
        prompt = batch_tokens(lengths, 1, 10**6, False) if lengths else GRPO_PROMPT_TOKENS
        seq = prompt + completion
        tokens = batch * seq
    else:
        seq = t.max_length
        tokens = batch_tokens(lengths, batch, seq, t.packing is not False if packed is None else packed)
    per_token_layer = 2 * (15 * s["hidden"] + 4.75 * s["intermediate"])  # 16-bit intermediates of one block
    offload = bool(t.activation_offloading)
    if t.gradient_checkpointing:
        kept = 0 if offload else tokens * s["hidden"] * 2 * s["layers"]  # each layer's input, unless offloaded
        acts = kept + tokens * per_token_layer
    else:
        acts = tokens * per_token_layer * s["layers"]
    # TRL (>= 1.16) scores tokens through a fused LM head in tiles of 4096 tokens x 32768 vocabulary entries, so
    # the full fp32 logits never exist; one tile, its gradient and the fp32 hidden states it reads remain.
    logits = min(tokens, LOGIT_TILE_TOKENS) * min(s["vocab"], LOGIT_TILE_VOCAB) * 4 * 2 + tokens * s["hidden"] * 4
    train_phase = acts + logits

    gen_phase = sampler_copy = 0.0
    if cfg.method == "grpo":
        spg = t.extra_args.get("steps_per_generation") or steps_per_generation(
            batch, t.gradient_accumulation_steps or 1, cfg.grpo.generation_batch_size, cfg.grpo.num_generations)
        seqs = t.extra_args.get("generation_batch_size") or batch * spg
        kv = 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * 2 * seqs * seq
        gen_phase = kv + seqs * s["vocab"] * 4
        kind = weight_copy or ("vllm" if cfg.grpo.use_vllm else "merged" if cfg.grpo.sampler == "merged" else "none")
        if kind != "none":
            sampler_copy = 2.0 * (params if kind == "vllm" else max(params - _embed_params(s), 0))
    peak_dynamic = max(train_phase, gen_phase)
    total = (weights + lora + peak_dynamic + sampler_copy) * FRAGMENTATION / GB + CUDA_CONTEXT_GB

    verdicts = {}
    for g in GPU_SIZES_GB:
        verdicts[g] = "fits" if total <= FIT_MARGIN * g else "tight" if total <= g else "too big"
    out.update(
        params=params, weights_gb=weights / GB, lora_params=lora_params, lora_gb=lora / GB,
        activations_gb=train_phase / GB, generation_gb=gen_phase / GB, sampler_copy_gb=sampler_copy / GB,
        overhead_gb=CUDA_CONTEXT_GB, total_gb=total, verdicts=verdicts, tokens_per_batch=tokens,
    )
    smallest = next((g for g in GPU_SIZES_GB if verdicts[g] == "fits"), None)
    size = f"{params / 1e9:.2f}B" if params >= 1e8 else f"{params / 1e6:.1f}M"
    out["summary"] = (f"~{total:.1f} GB peak ({size} params from {source}): "
                      + (f"fits a {smallest} GB GPU" if smallest else "does not fit 24 GB comfortably; lower "
                         "batch size / lengths, enable gradient checkpointing, or pick a smaller model"))
    return out


def fit_problem(est: dict, cfg, gpu_gb: float | None) -> str | None:
    """None when the estimate fits ``gpu_gb`` (or either is unknown), else the one-line refusal: the numbers, the
    changes that would make it fit, and the override."""
    total = est.get("total_gb")
    if total is None or not gpu_gb or total <= gpu_gb:
        return None
    t = cfg.training
    knobs = []
    if (t.per_device_train_batch_size or 1) > 1:
        knobs.append(f"training.per_device_train_batch_size={max(1, (t.per_device_train_batch_size or 1) // 2)} "
                     f"(with gradient_accumulation_steps={(t.gradient_accumulation_steps or 1) * 2})")
    if not t.gradient_checkpointing:
        knobs.append("training.gradient_checkpointing=true")
    if cfg.method == "grpo":
        knobs.append(f"grpo.max_completion_length={max(16, cfg.grpo.max_completion_length // 2)}")
        if cfg.grpo.num_generations > 2:
            knobs.append(f"grpo.num_generations={max(2, cfg.grpo.num_generations // 2)}")
        if est.get("generation_gb", 0) > est.get("activations_gb", 0):
            knobs.append(f"grpo.generation_batch_size={(t.per_device_train_batch_size or 1)}")
    else:
        knobs.append(f"training.max_length={max(128, t.max_length // 2)}")
        if not t.activation_offloading:
            knobs.append("training.activation_offloading=true")
    return (f"the memory estimate is {total:.1f} GB and this GPU has {gpu_gb:.1f} GB; try "
            + ", ".join(f"--set {k}" for k in knobs) + ", or a smaller model; --no-fit-check tries anyway")


def format_estimate(est: dict) -> str:
    """Markdown for the UI: the total, the verdict per card and the breakdown."""
    if est.get("total_gb") is None:
        return f"**Memory estimate:** {est['summary']}"
    # Coloured words, not emoji: headless / minimal systems often have no emoji font.
    color = {"fits": "#137333", "tight": "#b06000", "too big": "#b3261e"}
    cards = " · ".join(f"{g} GB: <span style='color:{color[v]}'>**{v}**</span>" for g, v in est["verdicts"].items())
    return (f"**Memory estimate:** {est['summary']}  \n{cards}  \n"
            f"<small>weights {est['weights_gb']:.2f} GB · LoRA+Adam {est['lora_gb']:.2f} GB "
            f"({est['lora_params'] / 1e6:.1f}M params) · activations {est['activations_gb']:.2f} GB"
            + (f" · generation {est['generation_gb']:.2f} GB" if est["generation_gb"] else "")
            + (f" · 16-bit sampling copy {est['sampler_copy_gb']:.2f} GB" if est.get("sampler_copy_gb") else "")
            + f" · CUDA overhead {est['overhead_gb']:.1f} GB</small>")
