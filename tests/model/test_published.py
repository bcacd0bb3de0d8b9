"""app/model/published.py: checkpoints written as the hub publishes them (tests/published.py: gpt-oss's MXFP4 experts,
Qwen3-MoE's block FP8, a per-tensor FP8 release, a dense block-FP8 model) load into a 4-bit run as their 16-bit twin
would (the same NF4 model, logits equal), a 16-bit run loads the twin's values, the experts' conversion runs in host
memory, and a format not read here is one line."""

import pytest
import published
import tiny

# (name, family builder, format, FP8 block side)
CASES = [("gpt-oss mxfp4", "gpt_oss", "mxfp4", None), ("qwen3-moe fp8 blocks", "qwen3_moe", "fp8", 32),
         ("qwen3-moe fp8 per tensor", "qwen3_moe", "fp8", None), ("qwen3 dense fp8 blocks", "qwen3", "fp8", 32)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple]:
    """{case: (source, published, twin)}: each tiny model as saved, as published, and its float32 twin."""
    root = tmp_path_factory.mktemp("published")
    tiny.build_tokenizer(root / "tok")
    out = {}
    for name, family, fmt, block in CASES:
        src = (tiny.build_moe(family, root / family, root / "tok") if family in tiny.MOE_FAMILIES else
               tiny.build_model(family, root / family, root / "tok"))
        out[name] = (src, *published.publish(src, root / name.replace(" ", "-"), fmt, block))
    return out


def _logits(path, **model):
    import torch

    from app.config.schema import ModelConfig
    from app.model.load import eval_keeping_4bit, load_base_model

    m, _, info = load_base_model(ModelConfig(name_or_path=str(path), **model), local_only=True, device="cpu")
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), eval_keeping_4bit(m):
        return m(input_ids=ids).logits, info


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_a_published_checkpoint_loads_into_nf4_as_its_16bit_twin(case, checkpoints):
    """The 4-bit load (experts quantized as they land) of the published files is the NF4 model of the values they
    stand for: logits equal to the twin's to the last bit; the 16-bit load equals the twin's too. (The writers' layout
    is the publishers': checked against transformers' own decoders below.)"""
    _, pub, twin = checkpoints[case]
    moe = "fp8" not in case or "moe" in case
    extra = {"quantize_experts": True} if moe else {}
    four, info = _logits(pub, **extra)
    assert info["published_as"] == ("mxfp4" if "mxfp4" in case else "fp8") and info["4bit"]
    if moe:
        assert info["experts"]["quantized_as_loaded"] > 0 and info["experts"]["quantized_after"] == 0
    twin_four, twin_info = _logits(twin, **extra)
    assert "published_as" not in twin_info and twin_info.get("experts") == info.get("experts")
    assert (four - twin_four).abs().max() == 0
    sixteen, info16 = _logits(pub, load_in_4bit=False)
    twin16, _ = _logits(twin, load_in_4bit=False)
    assert not info16["4bit"] and (sixteen - twin16).abs().max() < 1e-5


def test_a_torn_published_checkpoint_is_one_line(checkpoints, tmp_path):
    """A published file missing a piece (one layer's MXFP4 scales): transformers' loader cannot convert it; the load
    says so in one line naming the model and what to do, not a traceback from the loader's report."""
    import shutil

    from safetensors.torch import load_file, save_file

    from app.config.schema import ModelConfig
    from app.errors import UserError
    from app.model.load import load_base_model

    _, pub, _ = checkpoints["gpt-oss mxfp4"]
    torn = tmp_path / "torn"
    shutil.copytree(pub, torn)
    weights = load_file(str(torn / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if not k.endswith("layers.1.mlp.experts.down_proj_scales")},
              str(torn / "model.safetensors"), metadata={"format": "pt"})
    for four in (True, False):
        with pytest.raises(UserError) as e:
            load_base_model(ModelConfig(name_or_path=str(torn), load_in_4bit=four), local_only=True, device="cpu")
        line = str(e.value)
        assert f"could not load model '{torn}': its weight files do not make the model" in line and "\n" not in line


def test_the_mxfp4_writer_is_the_layout_transformers_reads():
    """tests/published.mxfp4's blocks and scales decode, with transformers' own MXFP4 decoder, to the values the
    writer says they stand for, each block within E2M1's rounding of the original."""
    import torch
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    w = torch.randn(3, 64, 96, generator=torch.Generator().manual_seed(0)) * 0.05
    blocks, scales, values = published.mxfp4(w)
    assert blocks.shape == (3, 96, 2, 16) and scales.shape == (3, 96, 2) and blocks.dtype == torch.uint8
    assert torch.equal(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32), values)
    assert (values - w).abs().max() < 0.25 * w.abs().max()


def test_the_fp8_writer_is_the_layout_transformers_reads():
    """tests/published.fp8's weight and weight_scale_inv (one per block, or one for the tensor) decode, with
    transformers' own FP8 dequantization, to the values the writer says they stand for."""
    import torch
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(0)) * 0.05
    for block, grid in ((32, (2, 3)), (None, ())):
        q, scale, values = published.fp8(w, block)
        assert q.dtype == torch.float8_e4m3fn and tuple(scale.shape) == grid and scale.dtype == torch.float32
        decoded = Fp8Dequantize(None).convert({"weight": q, "weight_scale_inv": scale})["weight"]
        assert torch.equal(decoded.float(), values) and (values - w).abs().max() < 0.1 * w.abs().max()


def test_the_experts_convert_in_host_memory(checkpoints):
    """The conversions of a 4-bit load: the format's dequantization joins transformers' own; a fused expert weight's
    converter runs in host memory (force_cpu: its unpacking temporaries never reach the GPU), a linear layer's
    converts where it loads."""
    from transformers import BitsAndBytesConfig
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.quantizers.auto import AutoHfQuantizer

    from app.model.published import _Reader, dequantizing_config
    from app.model.shape import meta_model, read_config

    for case, expert_targets in (("gpt-oss mxfp4", {"gate_up_proj", "down_proj"}),
                                 ("qwen3-moe fp8 blocks", {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"})):
        _, pub, _ = checkpoints[case]
        model = meta_model(str(pub), local_only=True, images=False)
        bnb = AutoHfQuantizer.from_config(BitsAndBytesConfig(load_in_4bit=True), pre_quantized=False)
        reader = _Reader(AutoHfQuantizer.from_config(dequantizing_config(read_config(str(pub))),
                                                     pre_quantized=True))
        conversions = reader(get_model_conversion_mapping(model, None, bnb), model)
        dequantizing = {c.target_patterns[0]: c.force_cpu for c in conversions
                        if any(isinstance(op, reader.dequantize) for op in getattr(c, "operations", []))}
        assert {t for t, cpu in dequantizing.items() if cpu} == expert_targets, dequantizing
        assert all(not cpu for t, cpu in dequantizing.items() if t not in expert_targets)


def test_which_formats_are_read_and_what_the_rest_is_told():
    from app.config.schema import ModelConfig
    from app.model.published import (dequantizing_config, format_line, published_format, published_format_problem,
                                     sixteen_bit_name)

    mx = {"quantization_config": {"quant_method": "mxfp4"}}
    block = {"text_config": {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}}
    per_tensor = {"quantization_config": {"quant_method": "fp8", "weight_block_size": None}}
    gptq = {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    assert published_format(mx) == "mxfp4" and published_format(block) == "fp8" and published_format({}) is None
    assert published_format({"quantization_config": {"quant_method": "bitsandbytes"}}) is None
    assert format_line(block) == "FP8, 128x128 blocks" and format_line(per_tensor) == "FP8, per tensor"
    assert format_line(mx).startswith("MXFP4") and format_line(gptq) is None and format_line(None) is None
    assert dequantizing_config(mx).dequantize and dequantizing_config(block).dequantize
    assert dequantizing_config(gptq) is None and dequantizing_config({}) is None
    four = ModelConfig(name_or_path="TheOrg/Qwen3-8B-GPTQ-Int4")
    assert published_format_problem(ModelConfig(name_or_path="openai/gpt-oss-20b"), mx) is None
    assert published_format_problem(ModelConfig(name_or_path="Qwen/Qwen3-30B-A3B-FP8"), block) is None
    line = published_format_problem(four, gptq)
    assert "is published in GPTQ" in line and "pass TheOrg/Qwen3-8B as --model" in line and "\n" not in line
    assert published_format_problem(ModelConfig(name_or_path="x", load_in_4bit=False), gptq) is None
    assert sixteen_bit_name("openai/gpt-oss-120b", "mxfp4") == "unsloth/gpt-oss-120b-BF16"
    assert sixteen_bit_name("Qwen/Qwen3-30B-A3B-FP8", "fp8") == "Qwen/Qwen3-30B-A3B"


# 4-bit loads (experts quantized as they land) one after another in a fresh process, each one's peak anonymous memory
# over what the process held before it, sampled every 2 ms from after the family's code is imported (the tensors the
# load makes; the safetensors files' mapped pages left out; glibc hands freed blocks back: MALLOC_MMAP_THRESHOLD_)
LOAD = """
import gc, json, sys, threading, time
from app.config.schema import ModelConfig
from app.model.load import load_base_model
from app.model.shape import meta_model
meta_model(sys.argv[1], local_only=True, images=False)

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
out = []
for path in sys.argv[1:]:
    peak, done = [anon()], threading.Event()
    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], anon())
            time.sleep(0.002)
    watcher = threading.Thread(target=watch, daemon=True)
    before = anon()
    watcher.start()
    model, _, info = load_base_model(ModelConfig(name_or_path=path, quantize_experts=True), local_only=True,
                                     device="cpu")
    done.set()
    watcher.join()
    out.append({"peak": max(peak[0], anon()) - before, "experts": info["experts"],
                "bytes": sum(p.numel() * p.element_size() for p in model.parameters())})
    del model
    gc.collect()
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("family, extra, fmt, block", [
    ("qwen3_moe", dict(moe_intermediate_size=512, num_experts=8, head_dim=64), "fp8", 128),
    ("gpt_oss", dict(num_local_experts=8, head_dim=64, sliding_window=64,
                     layer_types=["sliding_attention", "full_attention"] * 4), "mxfp4", None),
])
def test_a_mid_size_published_moe_loads_within_its_16bit_uploads_peak(family, extra, fmt, block, tmp_path):
    """About 50M expert parameters in 8 layers (the loader converts a layer at a time, as a real model's 48),
    published (block FP8 / MXFP4) and as its BF16 upload, each loaded in 4-bit in one fresh process (the BF16
    upload, the published one, the BF16 upload again: the second BF16 load is the one compared, both after a first):
    the same NF4 model (bytes equal), and the published load's peak within a quarter of one layer's experts (at the
    load's fp32) of the 16-bit upload's: the format's unpacking adds no layer-sized moment (the plan counts the
    16-bit upload's loading for both: test_a_flagship_as_published_plans_as_its_16bit_upload). Measured 2026-11-29:
    FP8 84 vs 84 MB, MXFP4 86 vs 85 MB; one layer's experts 25 MB."""
    import json
    import os
    import subprocess
    import sys

    from repo_paths import ROOT

    tiny.build_tokenizer(tmp_path / "tok")
    src = tiny.build_from_config(family, tmp_path / family, tmp_path / "tok", hidden_size=512, intermediate_size=512,
                                 num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
                                 num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False,
                                 dtype="bfloat16", **extra)
    pub, _ = published.publish(src, tmp_path, fmt, block)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    r = subprocess.run([sys.executable, "-c", LOAD, str(src), str(pub), str(src)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    first, published_run, again = json.loads(r.stdout.strip().splitlines()[-1])
    runs = {"published": published_run, "16-bit": again}  # the first load pays what any first load does
    layer = runs["16-bit"]["experts"]["quantized_as_loaded"] / 8 * 4  # one layer's expert weights in fp32
    print(f"{family} {fmt}: load peak {runs['published']['peak'] / 1e6:.0f} MB published, "
          f"{runs['16-bit']['peak'] / 1e6:.0f} MB from BF16; one layer's experts {layer / 1e6:.0f} MB")
    assert runs["published"]["experts"] == runs["16-bit"]["experts"]
    assert runs["published"]["bytes"] == runs["16-bit"]["bytes"]
    assert runs["published"]["peak"] - runs["16-bit"]["peak"] < 0.25 * layer, runs
