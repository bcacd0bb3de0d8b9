"""The LoRA adapter to attach (PEFT's LoraConfig from ours, "all-linear" made explicit) and the description of what
it covers."""

from __future__ import annotations

from app.config.schema import LoraConfig
from app.model.experts import expert_count, expert_targets
from app.model.vision import lora_target_pattern
from app.run.lookup import find_adapter


def peft_lora_config(lc: LoraConfig, targets=None, parameters: list[str] | None = None):
    """``targets``: the layers to wrap when not lc.target_modules itself (a vision-language model's are limited to
    its language model: app.model.vision.lora_target_pattern). ``parameters``: weights that are no layer, wrapped
    through PEFT's target_parameters (a MoE model's fused experts, lora.target_experts)."""
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=lc.r,
        lora_alpha=lc.alpha,
        lora_dropout=lc.dropout,
        # "LoRA Without Regret": all linear layers, attention and MLP; rank cannot make up for skipping MLPs.
        target_modules=targets or lc.target_modules,
        exclude_modules=lc.exclude_modules or None,
        **({"target_parameters": parameters} if parameters else {}),
        task_type="CAUSAL_LM",
    )


def attach_or_describe_lora(model, lc: LoraConfig, images: bool = False):
    """(model, peft_config) for a TRL trainer: a fresh adapter is described by a LoraConfig that TRL attaches;
    lora.init_from loads an existing adapter as trainable and TRL gets the PeftModel with no config. ``images``: a
    vision-language model loaded whole, whose adapter goes on its language model only (a plain regex stays the
    user's)."""
    from peft import PeftModel

    if isinstance(model, PeftModel):  # the Unsloth backend attaches its own adapter
        return model, None
    if not lc.init_from:
        plain_regex = isinstance(lc.target_modules, str) and lc.target_modules != "all-linear"
        targets = lora_target_pattern(model, lc.target_modules) if images and not plain_regex else None
        if lc.target_modules == "all-linear" and expert_count(model.config.to_dict()):
            # PEFT reads all-linear on a MoE model the transformers 4 way (its experts were linear layers then) and
            # adds LoRA on the fused experts and the router, or silently nothing on experts quantized after
            # loading: the layers are named here, and the experts are the run's choice (lora.target_experts)
            targets = targets or linear_layer_names(model)
        return model, peft_lora_config(lc, targets, expert_targets(model) if lc.target_experts else None)

    # Same preparation TRL gives a fresh adapter (it handles quantized bases itself), so both paths match.
    return PeftModel.from_pretrained(model, str(find_adapter(lc.init_from)), is_trainable=True), None


def linear_layer_names(model) -> list[str]:
    """The distinct names of the layers LoRA can target (q_proj, c_attn, ...), the LM head left out."""
    import torch
    from transformers.pytorch_utils import Conv1D

    out = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))}
    return sorted(out - {"lm_head"})
