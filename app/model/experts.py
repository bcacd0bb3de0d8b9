"""Mixture-of-experts weights. transformers 5 keeps a MoE layer's experts as fused 3-D parameters (Qwen3-MoE's
``mlp.experts.gate_up_proj``: experts x 2*intermediate x hidden), not ``nn.Linear``, and bitsandbytes' 4-bit loading
converts only ``nn.Linear``: the experts load at the compute dtype, most of such a model's bytes.

This module finds them on any family by what they are (the parameters of a module holding a 3-D or larger weight
that is not a convolution), never by a table of names; counts a model's parameters by how they load (linear layers
bitsandbytes converts, experts, the rest), on the model built on the meta device when planning; quantizes the
experts to NF4 as they load when asked (``QuantizeAsLoaded``: bitsandbytes' own parametrizations, the approach
Axolotl took); names them for PEFT's ``target_parameters``; and reads the router's settings from the config.

Owns those facts. Must not decide whether a run quantizes or trains the experts (app/train/planning/experts.py does),
nor do memory arithmetic (app/train/planning/memory.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Config keys that say a model routes tokens to experts (Qwen-MoE / OLMoE, Mixtral / gpt-oss, DeepSeek / GLM-MoE).
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
ROUTER_KEYS = ("num_experts_per_tok", "router_aux_loss_coef", "output_router_logits")


def expert_count(config: dict | None) -> int:
    """How many experts a MoE layer has, read from config.json (its text_config for a multimodal wrapper); 0 for a
    dense model."""
    if not config:
        return 0
    for c in (config.get("text_config") or {}, config):
        for key in EXPERT_COUNT_KEYS:
            if isinstance(c.get(key), int) and c[key] > 1:
                return c[key]
    return 0


def router_settings(config: dict | None) -> dict:
    """The router's settings the run trains with (as config.json has them): experts per token, the load-balancing
    loss coefficient, whether the model returns its router logits (TRL turns that on when the coefficient is not 0,
    and adds coefficient x the auxiliary loss to the loss)."""
    c = (config or {}).get("text_config") or config or {}
    return {k: c[k] for k in ROUTER_KEYS if k in c}


def _expert_modules(model):
    import torch

    conv = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    for path, module in model.named_modules():
        if isinstance(module, conv):
            continue
        own = list(module.named_parameters(recurse=False))
        if any(p.dim() >= 3 for _, p in own):
            yield path, module, own


def expert_parameters(model) -> dict[str, int]:
    """{full parameter name: elements} of every expert parameter (a fused expert module's weights and biases)."""
    return {f"{path}.{name}": p.numel() for path, _, own in _expert_modules(model) for name, p in own}


def expert_targets(model) -> list[str]:
    """The expert weights as PEFT's ``target_parameters`` names them (``mlp.experts.gate_up_proj``): each fused 3-D
    weight's path below its decoder layer, one entry per kind."""
    return _targets(_expert_modules(model))


def _targets(found) -> list[str]:
    out = []
    for path, _, own in found:
        tail = re.sub(r"^.*?\.\d+\.", "", path)  # below "...layers.<i>."
        out += [f"{tail}.{name}" for name, p in own if p.dim() >= 3]
    return sorted(set(out))


@dataclass(frozen=True)
class Census:
    """A model's parameters by how they load: ``linear`` (nn.Linear weights bitsandbytes converts to 4-bit),
    ``experts`` (fused expert parameters: 16-bit unless quantized as they load), ``other`` (embeddings, the LM head,
    norms, biases, routers and whatever ``skip`` named: kept at the compute dtype)."""

    total: int
    linear: int
    experts: int
    other: int
    experts_per_layer: int = 0  # how many experts a MoE layer has
    expert_layers: int = 0  # modules holding fused expert weights
    targets: tuple[str, ...] = field(default=())  # PEFT target_parameters names of the expert weights

    def record(self) -> dict:
        return {"params": self.total, "linear_params": self.linear, "expert_params": self.experts,
                "other_params": self.other, "experts": self.experts_per_layer, "expert_modules": self.expert_layers}


def census(model, skip=(), experts_per_layer: int = 0) -> Census:
    """Count ``model``'s parameters (a meta-device model is fine: only shapes are read). ``skip``: module paths
    bitsandbytes leaves unconverted (the LM head always; a vision-language model's vision side)."""
    import torch

    skip = tuple(skip) + ("lm_head",)
    found = list(_expert_modules(model))
    experts = sum(p.numel() for _, _, own in found for _, p in own)
    linear = 0
    for path, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and not any(path == s or path.startswith(s + ".") or
                                                       path.endswith("." + s) for s in skip):
            linear += m.weight.numel()
    total = sum(p.numel() for p in model.parameters())
    return Census(total, linear, experts, total - linear - experts, experts_per_layer, len(found),
                  tuple(_targets(found)))


def quantize_experts(model, quant_type: str = "nf4", double_quant: bool = True) -> int:
    """Every expert weight (3-D or more) not yet quantized, quantized in place to 4-bit with bitsandbytes'
    parametrizations: stored packed, dequantized when the layer reads it. Returns the elements quantized here (0
    after a load that quantized them as they were read). Biases stay as they are."""
    from bitsandbytes.nn.parametrize import replace_parameter_4bit

    n = 0
    for _, module, own in list(_expert_modules(model)):
        for name, p in own:
            if p.dim() >= 3:
                n += p.numel()
                replace_parameter_4bit(module, name, compress_statistics=double_quant, quant_type=quant_type)
    return n


class QuantizeAsLoaded:
    """The loader's callback (app/host/loading.after_each_param) that quantizes each fused expert weight to 4-bit
    the moment it is placed, so the 16-bit experts are never all in memory; ``elements`` counts what it quantized.
    An expert weight is found as everywhere here: a 3-D or larger parameter of a module that is not a convolution."""

    def __init__(self, quant_type: str = "nf4", double_quant: bool = True):
        self.quant_type, self.double_quant, self.elements = quant_type, double_quant, 0
        self.modules: dict[int, object] = {}  # the expert modules met, by id

    def __call__(self, module, name: str, param) -> None:
        import torch
        from bitsandbytes.nn.parametrize import replace_parameter_4bit

        if param.dim() < 3 or isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
            return
        self.elements += param.numel()
        self.modules[id(module)] = module
        replace_parameter_4bit(module, name, compress_statistics=self.double_quant, quant_type=self.quant_type)

    def expert_params(self) -> int:
        """The experts' parameters as loaded: the weights quantized here and their modules' own biases."""
        return self.elements + sum(p.numel() for m in self.modules.values() for p in m.parameters(recurse=False))
