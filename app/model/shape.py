"""A model's shape without its weights: hidden size, layers, heads, vocabulary, and its parameter count, read from
config.json (a local folder, or a hub model already in the HF cache: never downloaded), else guessed from the size in
a hub id ("1.5B", "7B", "500M") with the nearest typical shape.

Owns the shape facts the memory estimate (app/train/planning/memory.py) multiplies, and the model built on the meta
device (``meta_model``: its module tree and shapes, no memory). Must not estimate memory itself. Standard library only
at module level (huggingface_hub, torch and transformers are imported inside the functions that need them).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

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


def read_config(name_or_path: str) -> dict | None:
    """config.json of a local folder, or of a hub model already in the HF cache (never downloads). A plan reads it
    once, through app.model.files.ModelFiles."""
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


_READ = object()  # model_shape's config not given: read it


def model_shape(name_or_path: str, config: dict | None | object = _READ) -> tuple[dict | None, int | None, str]:
    """(shape, total params, where it came from). ``config``: its config.json as a plan read it (None: not on
    disk); read here when not given."""
    cfg = read_config(name_or_path) if config is _READ else config
    shape = _shape_from_config(cfg) if cfg else None
    if shape:
        return shape, _count_params(shape), "config.json"
    n = params_from_name(name_or_path)
    if n:
        shape = _shape_from_size(n)
        return shape, n, "model name"
    return None, None, "unknown"


def linear_sizes(s: dict) -> list[tuple[int, int]]:
    """(in, out) of each linear layer in one decoder block (attention q/k/v/o + the MLP, gated or not)."""
    h, i, q, kv = s["hidden"], s["intermediate"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    mlp = [(h, i), (h, i), (i, h)] if s.get("gated", True) else [(h, i), (i, h)]
    return [(h, q), (h, kv), (h, kv), (q, h), *mlp]


def embed_params(s: dict) -> int:
    """Input embeddings plus the LM head (one matrix when tied): never quantized by bitsandbytes."""
    return s["vocab"] * s["hidden"] * (1 if s["tied"] else 2)


def _count_params(s: dict) -> int:
    return s["layers"] * sum(a * b for a, b in linear_sizes(s)) + embed_params(s)


def linear_attention_layers(config: dict | None) -> int:
    """How many of a model's layers are linear attention (Qwen3.5 / Qwen3-Next's Gated DeltaNet), read from
    config.json's ``layer_types`` (its text_config's for a vision-language model); 0 for full-attention models."""
    if not config:
        return 0
    for c in (config.get("text_config") or {}, config):
        types = c.get("layer_types")
        if isinstance(types, list):
            return sum(t == "linear_attention" for t in types)
    return 0


def meta_model(name_or_path: str, revision=None, trust_remote_code: bool = False, local_only: bool = False,
               images: bool = True, config=None):
    """The model of ``name_or_path`` built from its config on the meta device, as a run loads it (image-text-to-text,
    or causal LM when not ``images``): its module tree and shapes without memory or weights. ``config``: its
    transformers config when the caller has it (a plan's ModelFiles), else read here."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    if config is None:
        config = AutoConfig.from_pretrained(name_or_path, revision=revision, trust_remote_code=trust_remote_code,
                                            local_files_only=local_only)
    auto = AutoModelForImageTextToText if images else AutoModelForCausalLM
    with torch.device("meta"):
        return auto.from_config(config, trust_remote_code=trust_remote_code)
