"""A checkpoint published quantized: its config.json's ``quantization_config`` (gpt-oss's MXFP4 experts, the FP8
releases of Qwen3, Qwen3.5, DeepSeek and GLM, GPTQ / AWQ uploads), which of those formats a run reads here, and how.

MXFP4 and fine-grained FP8 (per-tensor or block-scaled, ``quant_method: fp8``) are read by transformers' own
dequantizing operations (its MXFP4 / FP8 quantizers' dequantize mode), one tensor at a time as the loader gathers it:
a 4-bit run's bitsandbytes quantizer then makes each linear layer's weight NF4, and the fused experts become NF4 as
they are placed (app/model/experts.QuantizeAsLoaded), so the 16-bit model never exists whole. transformers takes
one quantization per load (it refuses MXFP4 beside bitsandbytes), so the format's conversions join the load through
app/host/loading.weight_conversions, and its quantization_config is taken off the config the load is given. A 16-bit
run (``model.load_in_4bit=false``) and a merged export read the same formats through transformers' dequantize mode
alone. Any other format is one line before anything loads, naming a 16-bit upload of the same model.

Owns those facts and the reading. Must not plan memory (app/train/planning/memory.py counts what is in flight) nor
decide whether a run is 4-bit.
"""

from __future__ import annotations

import contextlib
import re

from app.host.loading import weight_conversions
from app.model.experts import expert_targets

# quantization_config.quant_method values, by the words a user knows them by
PUBLISHED_FORMATS = {"mxfp4": "MXFP4", "fp8": "FP8", "fbgemm_fp8": "FP8 (per-channel, FBGEMM)",
                     "compressed-tensors": "compressed-tensors (FP8 / INT8)", "gptq": "GPTQ", "awq": "AWQ",
                     "hqq": "HQQ", "eetq": "EETQ", "torchao": "torchao", "bitnet": "BitNet", "quark": "Quark",
                     "fp_quant": "FP-Quant", "spqr": "SpQR", "vptq": "VPTQ", "higgs": "HIGGS", "aqlm": "AQLM"}
# The formats read into NF4 here: transformers dequantizes them tensor by tensor with its own operations.
READ_HERE = ("mxfp4", "fp8")
_QUANT_SUFFIX = re.compile(r"[-_.](fp8|mxfp4|awq|gptq(-int[48])?|int[48]|w8a8|fp8-dynamic|fp8-block)$", re.I)


def _quantization(config: dict | None) -> dict | None:
    for part in (config or {}, (config or {}).get("text_config") or {}):
        q = part.get("quantization_config")
        if isinstance(q, dict) and q.get("quant_method") and q["quant_method"] != "bitsandbytes":
            return q
    return None


def published_format(config: dict | None) -> str | None:
    """The quant_method of a checkpoint published quantized (its config.json's quantization_config, or its text
    model's), else None. bitsandbytes uploads load as 4-bit runs load them: None too."""
    q = _quantization(config)
    return str(q["quant_method"]) if q else None


def format_line(config: dict | None) -> str | None:
    """How a checkpoint published in a format read here is read, in a few words for the plan and status.json (None:
    a 16-bit checkpoint, or a format transformers loads as it is)."""
    fmt = published_format(config)
    if fmt not in READ_HERE:
        return None
    q = _quantization(config) or {}
    block = q.get("weight_block_size")
    detail = (", 32-value blocks (the experts)" if fmt == "mxfp4" else f", {block[0]}x{block[1]} blocks" if block
              else ", per tensor")
    return f"{PUBLISHED_FORMATS.get(fmt, fmt)}{detail}"


def sixteen_bit_name(name: str, fmt: str) -> str:
    """Where the same model's 16-bit weights are usually published: the repository without the quantization in its
    name (Qwen/Qwen3-30B-A3B-FP8 -> Qwen/Qwen3-30B-A3B); gpt-oss's BF16 copy (its only release is MXFP4)."""
    base = name.rstrip("/").split("/")[-1]
    if fmt == "mxfp4" and "gpt-oss" in base.lower():
        return f"unsloth/{base}-BF16"
    stripped = _QUANT_SUFFIX.sub("", name.rstrip("/"))
    return stripped if stripped != name.rstrip("/") else "a 16-bit (BF16 / FP16) upload of the same model"


def published_format_problem(mc, config: dict | None) -> str | None:
    """The line for a 4-bit run of a checkpoint published in a format not read here (GPTQ, AWQ, compressed-tensors,
    ...): transformers refuses it beside bitsandbytes (a traceback after the plan said it fits, otherwise). None
    when it loads: a 16-bit checkpoint, MXFP4, FP8, or a 16-bit run (transformers dequantizes what it can)."""
    fmt = published_format(config)
    if fmt is None or fmt in READ_HERE or not mc.load_in_4bit:
        return None
    kind = PUBLISHED_FORMATS.get(fmt, fmt)
    read = " and ".join(PUBLISHED_FORMATS[m] for m in READ_HERE)
    return (f"model '{mc.name_or_path}' is published in {kind} (its config.json's quantization_config), which a 4-bit "
            f"run does not read (it reads 16-bit, {read} checkpoints): pass "
            f"{sixteen_bit_name(mc.name_or_path, fmt)} as --model (the same model, 16-bit), or set "
            "model.load_in_4bit=false to train it as transformers dequantizes it (16-bit memory)")


def dequantizing_config(config: dict | None):
    """transformers' own quantization config of the checkpoint's format in its dequantize mode (None: not published in
    a format read here): passed to a 16-bit load, the published tensors load as 16-bit weights."""
    q = _quantization(config)
    if q is None or q["quant_method"] not in READ_HERE:
        return None
    from transformers.quantizers.auto import AutoQuantizationConfig  # heavy

    return AutoQuantizationConfig.from_dict({**q, "dequantize": True})


def as_sixteen_bit(model, dtype) -> int:
    """``model``, loaded 16-bit through transformers' dequantize mode, made what a 16-bit upload loads as: its
    floating parameters all at ``dtype`` (a torch dtype: the mode keeps the tensors the format left unquantized, BF16
    norms, embeddings and router, at the checkpoint's dtype beside the dequantized ones at the load's), and saved as
    a 16-bit model (transformers records the conversions a load used and reverses them on save; the format's
    dequantization has no reverse, so the record is dropped and save_pretrained writes the model's own layout).
    Returns how many parameters were cast."""
    n = 0
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
            n += 1
    model._weight_conversions = None  # save_pretrained then reverses the model's own conversion mapping
    return n


@contextlib.contextmanager
def read_into_4bit(deq, hf_config):
    """Within: a 4-bit (bitsandbytes) load of a checkpoint published in MXFP4 / FP8 (``deq``: its
    dequantizing_config) reads each published tensor dequantized by the format's own operation, which bitsandbytes
    (or the experts' callback) then quantizes; ``hf_config``, the transformers config the load is given, loses its
    quantization_config for the load's sake (transformers takes one quantization)."""
    from transformers.quantizers.auto import AutoHfQuantizer  # heavy

    for part in {id(p): p for p in (hf_config, hf_config.get_text_config(decoder=True))}.values():
        if getattr(part, "quantization_config", None) is not None:
            del part.quantization_config
    with weight_conversions(_Reader(AutoHfQuantizer.from_config(deq, pre_quantized=True))):
        yield


class _Reader:
    """The load's weight conversions with the published format's added (its quantizer's, in dequantize mode). A
    fused expert weight's conversion runs in host memory (transformers' ``force_cpu``): MXFP4's unpacking of a
    layer's experts takes several times their 16-bit bytes in temporaries (gpt-oss-20b: about 3.5 GB for one
    gate_up_proj), FP8's works in float32; only the 16-bit result goes to the GPU, where it is quantized as it lands
    (the same bytes in flight as a 16-bit upload's, what the plan counts). Linear layers' weights convert where they
    load, one matrix at a time."""

    def __init__(self, quantizer):
        self.quantizer = quantizer
        self.dequantize = quantizer.get_load_operations()["dequantize"]

    def __call__(self, conversions: list, model) -> list:
        experts = expert_targets(model)  # the fused expert weights, as "mlp.experts.gate_up_proj"
        out = []
        for c in self.quantizer.update_weight_conversions(conversions, model):
            ops = getattr(c, "operations", None) or []
            if any(isinstance(op, self.dequantize) for op in ops) and any(
                    name.endswith(target) for target in c.target_patterns for name in experts):
                c = c.copy(c._original_source_patterns, c._original_target_patterns, operations=list(ops),
                           force_cpu=True)
            out.append(c)
        return out
