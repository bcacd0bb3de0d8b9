"""A tiny model written as the hub publishes quantized checkpoints, beside its twin holding exactly the values the
published tensors stand for (in float32) (what a correct reader must load):

- MXFP4 as ``openai/gpt-oss-20b``: each fused expert weight as ``<name>_blocks`` (uint8, two E2M1 nibbles a byte,
  low nibble first; experts x out x in/32 x 16) and ``<name>_scales`` (uint8 E8M0 exponents + 127; experts x out x
  in/32), everything else BF16, ``quantization_config: {quant_method: mxfp4, modules_to_not_convert: [...]}``.
- FP8 as ``Qwen/Qwen3-30B-A3B-FP8`` (block-scaled: ``weight_block_size``) or a per-tensor release
  (``weight_block_size: null``): every linear weight but the router's and the head's as float8_e4m3fn with its
  ``weight_scale_inv`` (float32, one per block or one per tensor), per expert as saved, ``quant_method: fp8``.

The encoders are written here from the formats' definitions (OCP MX spec; DeepSeek-V3's block FP8), not with
transformers' code, so a reader that disagrees with the publishers' layout fails the tests."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
KEEP_16BIT = re.compile(r"embed|lm_head|norm|mlp\.gate\.weight$|router")


def mxfp4(weight):
    """(blocks, scales, dequantized) of a fused expert weight (experts x in x out, as transformers holds it)."""
    import torch

    lut = torch.tensor(E2M1)
    t = weight.float().transpose(1, 2)  # published as experts x out x in
    e, o, i = t.shape
    groups = t.reshape(e, o, i // 32, 32)
    amax = groups.abs().amax(-1).clamp(min=2.0 ** -120)
    exp = torch.ceil(torch.log2(amax / 6.0))  # the largest value of a block fits E2M1's 6
    x = groups / torch.exp2(exp)[..., None]
    code = (x.abs()[..., None] - lut).abs().argmin(-1) + 8 * (x < 0)
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)
    values = torch.cat([lut, -lut])[code] * torch.exp2(exp)[..., None]
    return blocks, (exp + 127).to(torch.uint8), values.reshape(e, o, i).transpose(1, 2).contiguous()


def fp8(weight, block: int | None):
    """(float8_e4m3fn weight, float32 weight_scale_inv, dequantized) of a 2-D weight; ``block``: its square block
    side (None: one scale for the tensor)."""
    import torch

    w = weight.float()
    r, c = w.shape
    br, bc = (block, block) if block else (r, c)
    grid = w.reshape(r // br, br, c // bc, bc)
    scale = (grid.abs().amax(dim=(1, 3)) / 448.0).clamp(min=1e-12)  # E4M3's largest finite value
    q = (grid / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    values = (q.float() * scale[:, None, :, None]).reshape(r, c)
    return q.reshape(r, c), (scale if block else scale.reshape(())), values


def _copy_small_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)


def publish(src: Path, out: Path, fmt: str, block: int | None = 32) -> tuple[Path, Path]:
    """(published folder, its float32 twin) of the model saved at ``src``, in ``fmt`` (mxfp4 | fp8)."""
    import torch
    from safetensors.torch import load_file, save_file

    pub, twin = out / f"{src.name}-{fmt}", out / f"{src.name}-{fmt}-twin"
    _copy_small_files(src, pub)
    _copy_small_files(src, twin)
    index = src / "model.safetensors.index.json"
    files = sorted({*json.loads(index.read_text())["weight_map"].values()}) if index.exists() else \
        ["model.safetensors"]
    weight_map = {}
    for name in files:
        written, values = {}, {}
        for k, w in load_file(str(src / name)).items():
            if fmt == "mxfp4" and re.search(r"experts\.(gate_up_proj|down_proj)$", k):
                written[k + "_blocks"], written[k + "_scales"], v = mxfp4(w)
            elif fmt == "fp8" and w.dim() == 2 and k.endswith(".weight") and not KEEP_16BIT.search(k):
                written[k], written[k[:-len("weight")] + "weight_scale_inv"], v = fp8(w, block)
            else:  # the rest in BF16, as both publish it
                written[k] = v = w.to(torch.bfloat16)
            values[k] = v.float()  # exactly what the published tensors stand for
        save_file(written, str(pub / name), metadata={"format": "pt"})
        save_file(values, str(twin / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in written})
    if index.exists():
        (pub / index.name).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        (twin / index.name).write_text(index.read_text())
    config = json.loads((src / "config.json").read_text())
    twin_config = {**config, "dtype": "float32"}
    if fmt == "mxfp4":
        quant = {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    else:
        layers = config.get("num_hidden_layers", 0)
        quant = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                 "weight_block_size": [block, block] if block else None,
                 "modules_to_not_convert": ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in range(layers)]}
    (pub / "config.json").write_text(json.dumps({**twin_config, "quantization_config": quant}, indent=1))
    (twin / "config.json").write_text(json.dumps(twin_config, indent=1))
    return pub, twin
