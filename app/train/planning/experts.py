"""The plan's mixture-of-experts decisions: a model whose config routes tokens to experts is counted on its own tree
(built on the meta device) as it will load, so the memory estimate and the fit check see its experts at the bytes
they take: 4-bit when ``model.quantize_experts`` quantizes them as they load (auto: when 16-bit experts would not
fit the GPU, decided by the fit check: app/train/planning/preflight.py), else 16-bit, as transformers loads fused
experts; LoRA on the experts only when ``lora.target_experts`` asks (and then 16-bit: PEFT wraps the weights as
loaded); the router's settings recorded as the run trains with them.

The Unsloth backend loads through transformers' own 4-bit loader, which leaves fused experts 16-bit, and its MoE
kernels read them so; only the hf backend quantizes them as they load. So a MoE run on Unsloth is planned with
16-bit experts (``unsloth_experts``), and on ``runtime.backend=auto`` one whose experts may need 4-bit runs on hf.

Owns ``plan_experts`` (called by app/train/planning/plan.make_plan) and the ``Experts`` facts status.json and the card
read. Must not load weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.errors import UserError
from app.model.experts import Census, census, expert_count, router_settings
from app.model.source import model_load_error


@dataclass(frozen=True)
class Experts:
    """What the plan knows of a mixture-of-experts run."""

    census: Census
    quantized: bool  # model.quantize_experts (as decided), on a 4-bit run
    lora: bool  # lora.target_experts
    router: dict
    why: str = ""  # why they are 4-bit or 16-bit

    def record(self) -> dict:
        """What status.json keeps (the card reads it)."""
        return {**self.census.record(), "experts_4bit": self.quantized, "experts_precision_why": self.why,
                "lora_on_experts": self.lora,
                "lora_expert_targets": list(self.census.targets) if self.lora else [], "router": self.router}

    def line(self) -> str:
        c = self.census
        share = c.experts / max(c.total, 1)
        kept = (f"NF4, each quantized as it loads ({self.why or 'model.quantize_experts'})" if self.quantized else
                "16-bit: fused 3-D weights, which bitsandbytes does not convert (" +
                (self.why or "model.quantize_experts=true makes them NF4 as they load") + ")")
        lora = ("LoRA on the experts too (lora.target_experts: " + ", ".join(c.targets) + ")" if self.lora else
                "LoRA on the linear layers, not the experts (lora.target_experts=true adds them)")
        router = ", ".join(f"{k} {v}" for k, v in self.router.items())
        return (f"experts: {c.experts_per_layer} per MoE layer in {c.expert_layers} layer(s), {c.experts / 1e6:.2f}M "
                f"of {c.total / 1e6:.2f}M params ({share:.0%}), {kept}; {lora}" + (f"; router: {router}" if router
                                                                                    else ""))


def plan_experts(cfg, files, skip=()) -> Experts | None:
    """The run's Experts (None for a dense model, or one whose config is not on disk). ``files``: the model's, as the
    plan read them (app.model.files.ModelFiles); ``skip``: module paths bitsandbytes leaves unconverted besides the LM
    head (a vision-language model's vision side). Raises UserError for LoRA on the experts of a dense model, or on
    experts asked in 4-bit. Their precision is decided by the fit check, then said (``as_decided``)."""
    mc, lc = cfg.model, cfg.lora
    config = files.config
    n = expert_count(config)
    if not n:
        if lc.target_experts and config is not None:
            raise UserError(f"lora.target_experts is set but model '{mc.name_or_path}' has no experts (a dense "
                            "model); unset it (--set lora.target_experts=false)")
        return None
    if lc.target_experts and mc.experts_in_4bit:
        raise UserError("lora.target_experts needs the experts in 16-bit: PEFT cannot wrap weights bitsandbytes "
                        "quantized; set model.quantize_experts=false (or leave it empty), or leave the experts "
                        "without LoRA")
    from huggingface_hub.errors import StrictDataclassError  # heavy: only for a MoE model's plan

    try:
        shell = files.shell(images=bool(mc.images))
    except (OSError, ValueError, StrictDataclassError) as e:  # a family this transformers does not know, say
        raise model_load_error(mc.name_or_path, e) from None
    return Experts(census(shell, skip, n), mc.experts_in_4bit, bool(lc.target_experts), router_settings(config))


def may_be_4bit(cfg) -> bool:
    """Whether a MoE run's experts may end up 4-bit: a 4-bit run, no LoRA on them (PEFT wraps them as loaded, in
    16-bit), not model.quantize_experts=false. The one statement of it (the fit check, the backend, the line)."""
    mc = cfg.model
    return mc.load_in_4bit and mc.quantize_experts is not False and not cfg.lora.target_experts


def on_auto(cfg) -> bool:
    """Whether their precision is the plan's to choose: they may be 4-bit and model.quantize_experts is empty (the
    fit check makes them 4-bit where 16-bit would not fit, and records model.quantize_experts=true)."""
    return may_be_4bit(cfg) and cfg.model.quantize_experts is None


def as_decided(experts: Experts | None, cfg, fitted: bool, say) -> Experts | None:
    """The run's Experts once the fit check has decided their precision (``fitted``: it turned them 4-bit), said
    in one line with the reason."""
    if experts is None:
        return None
    mc = cfg.model
    why = ("auto: 16-bit they would not fit this GPU" if fitted else "model.quantize_experts" if mc.experts_in_4bit
           else "lora.target_experts: PEFT wraps them as loaded" if cfg.lora.target_experts
           else "auto: they fit in 16-bit; model.quantize_experts=true makes them NF4 as they load"
           if on_auto(cfg) else "")
    experts = replace(experts, quantized=mc.experts_in_4bit, why=why)
    say(experts.line())
    return experts


def unsloth_experts(experts: Experts | None, cfg, backend: str, say) -> tuple[str, dict]:
    """(backend, changes) for a MoE run the machine would give Unsloth: kept where its experts stay 16-bit anyway
    (model.quantize_experts=false, or LoRA on them); on runtime.backend=auto the hf backend, which alone quantizes
    them as they load (the fit check may need them 4-bit); on an explicit unsloth, the experts planned 16-bit as
    Unsloth loads them (quantize_experts=true there is one line)."""
    if experts is None or backend != "unsloth":
        return backend, {}
    mc = cfg.model
    if not may_be_4bit(cfg):
        return backend, {}
    if cfg.runtime.backend != "unsloth":
        say("backend hf: only it quantizes a mixture-of-experts model's fused experts as they load (Unsloth loads "
            "them 16-bit through transformers' 4-bit loader); model.quantize_experts=false keeps Unsloth with "
            "16-bit experts")
        return "hf", {}
    if mc.quantize_experts:
        raise UserError("model.quantize_experts=true needs runtime.backend=hf (or auto): Unsloth loads a "
                        "mixture-of-experts model's fused experts 16-bit; use runtime.backend=hf, or "
                        "model.quantize_experts=false to keep Unsloth")
    say("the experts stay 16-bit on the Unsloth backend (it loads them through transformers' 4-bit loader, which "
        "leaves fused experts as they are); runtime.backend=hf quantizes them as they load")
    return backend, {"model.quantize_experts": False}
