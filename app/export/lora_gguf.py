"""A run's adapter alone as one GGUF in llama.cpp's LoRA format (``general.type`` adapter, ``adapter.type`` lora), for
people who keep the base model's GGUF and load the adapter beside it (``llama-server -m BASE.gguf --lora FILE``,
Ollama's ``ADAPTER``): a few MB where the merged model is gigabytes, and one base shared by several adapters.

The tensors are named as llama.cpp's converter names the base's weights (``blk.0.attn_q.weight.lora_a`` and
``.lora_b``), through the converter's own class for the base's architecture, so the names are the ones the base's
GGUF holds. What that class does to a weight on its way into a GGUF (LLaMA's rotary permute of q and k, a fused
projection split in parts) moves the weight's rows; a LoRA update ``B @ A`` has B's rows, so the class is run on B
and A is kept (each part of a split gets the same A), and the base's GGUF plus this file computes what the merged
GGUF does. A class that changes a weight other than by its rows is refused for the adapter (the merged GGUF still
works). llama.cpp scales each update by alpha / rank (rank read from the tensor), PEFT's plain LoRA too; where PEFT
scales otherwise (rsLoRA's alpha / sqrt(r), a per-module alpha), the scale is written into B and alpha left 0, which
llama.cpp reads as "scale 1".

Owns the adapter GGUF's tensors and keys. Must not merge (app/export/bundle.py) nor load the base's weights: only
the base's config.json is read.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

from app.errors import UserError
from app.export import gguf as gguf_mod
from app.run import lookup

TYPES = ("f16", "bf16", "q8_0", "f32")  # what llama.cpp's LoRA files hold (its own converter's choices)
DEFAULT = "f16"
_KEY = re.compile(r"^base_model\.model\.(?P<path>.+)\.lora_(?P<half>[AB])\.weight$")
_MERGED = "export --format gguf (the adapter merged into the model)"


@dataclass
class Pairs:
    """The adapter's LoRA pairs by the base weight's name (``model.layers.0.self_attn.q_proj.weight``), each B
    already carrying any scale llama.cpp would not apply, and the alpha to write (0: the scale is in B)."""
    ab: dict  # name -> (A, B)
    alpha: float
    baked: bool


def check_type(outtypes: list[str]) -> str:
    """The one type an adapter GGUF is written in; a k-quant (the model GGUF's default) is refused in one line."""
    if len(outtypes) != 1 or outtypes[0] not in TYPES:
        raise UserError(f"--outtype {','.join(outtypes)} is not a type of an adapter GGUF; pick one of "
                        f"{', '.join(TYPES)} ({DEFAULT} is the default: the adapter is small beside the base)")
    return outtypes[0]


def read_pairs(adapter_dir: Path) -> Pairs:
    """The adapter's pairs, or one line naming what llama.cpp's LoRA format cannot carry and the fix."""
    from peft.utils.other import get_pattern_key
    from safetensors.torch import load_file

    cfg = lookup.adapter_config(adapter_dir)
    if cfg.get("peft_type", "LORA") != "LORA":
        raise UserError(f"the adapter is {cfg.get('peft_type')}, not LoRA; llama.cpp's adapter files hold LoRA "
                        f"only: {_MERGED}")
    for key, what in (("use_dora", "DoRA"), ("target_parameters", "LoRA on the experts' fused parameters"),
                      ("modules_to_save", "fully trained modules"), ("trainable_token_indices", "trained tokens")):
        if cfg.get(key):
            raise UserError(f"the adapter has {what} ({key}), which llama.cpp's adapter files cannot carry: "
                            f"{_MERGED}")
    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    halves: dict[str, dict[str, object]] = {}
    for key, tensor in weights.items():
        m = _KEY.match(key)
        if m is None:
            raise UserError(f"the adapter holds {key!r}, not a LoRA A or B matrix (an embedding, a bias or a fully "
                            f"trained weight), which llama.cpp's adapter files cannot carry: {_MERGED}")
        halves.setdefault(m["path"] + ".weight", {})[m["half"]] = tensor
    alpha = float(cfg.get("lora_alpha", 8))
    rslora, alphas = bool(cfg.get("use_rslora")), cfg.get("alpha_pattern") or {}
    baked = rslora or bool(alphas)  # llama.cpp applies one alpha over each tensor's own rank: plain LoRA only
    ab = {}
    for name, h in halves.items():
        if set(h) != {"A", "B"}:
            raise UserError(f"the adapter's {name} has only lora_{''.join(h)}; the file is incomplete: export the "
                            "adapter again from its run")
        a, b = h["A"].float(), h["B"].float()
        if baked:  # the module's own alpha by PEFT's matching rule; its rank is its A's rows (rank_pattern's too)
            a_m = float(alphas.get(get_pattern_key(alphas, name.removesuffix(".weight")), alpha))
            rank = a.shape[0]
            b = b * (a_m / (math.sqrt(rank) if rslora else rank))
        ab[name] = (a, b)
    return Pairs(ab=ab, alpha=0.0 if baked else alpha, baked=baked)


def base_hparams(base: str, local_only: bool) -> tuple[dict, Path]:
    """The base's config.json (as the converter reads it) and its folder; only the config is read, never weights."""
    from transformers.utils import cached_file

    found = cached_file(str(base), "config.json", local_files_only=local_only,
                        _raise_exceptions_for_missing_entries=False)
    if not found:
        raise UserError(f"the base model {base} has no config.json here; an adapter GGUF is named after the base's "
                        "tensors, so its config is needed: download the base first (qlora-app prefetch)")
    _, ModelBase, _, _ = gguf_mod.converter()
    folder = Path(found).parent
    hparams = gguf_mod.hub_hparams(ModelBase.load_hparams(folder, False))
    hparams.pop("quantization_config", None)  # a 4-bit upload of the base: its names are the same
    return hparams, folder


def convert_adapter(adapter_dir: Path, base: str, out_file: Path, outtype: str, model_name: str,
                    local_only: bool = False) -> Pairs:
    """Write ``out_file``: the adapter's pairs under the base's GGUF names, in ``outtype``."""
    import torch

    gguf, _, get_model_architecture, get_model_class = gguf_mod.converter()
    from conversion import ModelType

    pairs = read_pairs(adapter_dir)
    hparams, folder = base_hparams(base, local_only)
    ftype = {"f16": gguf.LlamaFileType.MOSTLY_F16, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
             "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "f32": gguf.LlamaFileType.ALL_F32}[outtype]
    with gguf_mod.converter_log(logging.ERROR), torch.inference_mode():  # ERROR: no line per tensor
        cls = _adapter_class(get_model_class(get_model_architecture(hparams, ModelType.TEXT)), pairs, gguf)
        model = cls(folder, ftype, out_file, model_name=model_name, hparams=hparams)
        model.dir_model_card = adapter_dir  # its metadata (name, base) from the adapter's own card
        write = model.gguf_writer.write_tensors_to_file
        model.gguf_writer.write_tensors_to_file = lambda **kw: write(progress=False)
        model.write()
    return pairs


def _adapter_class(cls, pairs: Pairs, gguf):
    """The converter's class for the base, reading the adapter's pairs instead of the base's weights (each pair
    enters as its B under the base weight's name) and writing llama.cpp's adapter keys instead of the model's."""
    class Adapter(cls):
        model_arch = cls.model_arch  # the converter asks each text class to name its own
        no_mtp = True

        def index_tensors(self, remote_hf_model_id=None):
            self.lora_a = {}  # the name each pair enters under -> its A
            return {}  # the base's weights are never read

        def get_tensors(self):
            for name, (a, b) in pairs.ab.items():
                kept = type(self).filter_tensors((name, lambda b=b: b))  # its renames ("language_model.")
                if kept is None:
                    raise UserError(f"llama.cpp's converter leaves the adapter's {name} out of a GGUF (a part of "
                                    f"the model it does not convert): {_MERGED}")
                self.lora_a[kept[0]] = a
                yield kept[0], kept[1]()

        def generate_extra_tensors(self):
            return ()  # rope tables and the like belong to the base's GGUF

        def set_vocab(self):
            pass

        def set_type(self):
            self.gguf_writer.add_type(gguf.GGUFType.ADAPTER)
            self.gguf_writer.add_string(gguf.Keys.Adapter.TYPE, "lora")

        def set_gguf_parameters(self):
            self.gguf_writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, pairs.alpha)

        def modify_tensors(self, data_torch, name, bid):
            a = self.lora_a[name]
            rank = a.shape[0]
            parts = list(super().modify_tensors(data_torch, name, bid))
            if not parts:
                raise UserError(f"llama.cpp's converter writes no tensor for the adapter's {name} (a weight its "
                                f"GGUF leaves out or ties to another): {_MERGED}")
            if sum(p.shape[0] for _, p in parts) != data_torch.shape[0] or any(
                    p.dim() != 2 or p.shape[1] != rank for _, p in parts):
                raise UserError(f"llama.cpp's converter changes {name} other than by its rows, which an adapter "
                                f"cannot follow: {_MERGED}")
            for new_name, b in parts:
                yield new_name + ".lora_a", a
                yield new_name + ".lora_b", b

    Adapter.__name__ = cls.__name__
    return Adapter
