"""GPU fast paths: which ones a run uses, and what they become in TRL's arguments.

Each fast path is a config key whose empty value means auto, and auto turns it on only where it helps and can run:
  - grpo.use_vllm: vLLM generation in colocate mode (same process, same GPU), when CUDA is there and vllm imports;
  - training.use_liger_kernel: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU), when CUDA is there and liger_kernel
    imports (TRL keeps its own fused LM head: it turns Liger's fused cross-entropy off itself);
  - training.activation_offloading (SFT): checkpointed activations parked in CPU memory, on CUDA only, and on auto
    only when the fit check says the run needs it;
  - grpo.generation_batch_size: completions sampled at once (TRL's generation_batch_size). Sampling is launch-bound
    on a GPU (64 sequences cost about what 8 cost) and Python-bound on a CPU, so auto samples for several optimizer
    steps at once; TRL then scores the buffered samples with the log-probs of the policy that drew them (importance
    ratio, clipped), so the later steps stay sound.
A path forced on where it cannot run is a UserError (exit 2) that names the missing piece. The Unsloth backend
brings its own kernels and generation: liger, vLLM and offloading stay off there.

Decisions are pure functions of (config, Env) so they are unit-tested on a machine without a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from app.config.methods import method_of
from app.errors import UserError
from app.host.machine import installed
from app.train.planning.batching import steps_per_generation


@dataclass(frozen=True)
class Env:
    """What the machine offers; built by detect_env, or by hand in tests."""

    cuda: bool
    vllm: bool = False
    liger: bool = False
    backend: str = "hf"
    fla: bool = False  # flash-linear-attention (import name fla)
    causal_conv1d: bool = False


def detect_env(cuda: bool, backend: str = "hf") -> Env:
    return Env(cuda=cuda, vllm=installed("vllm"), liger=installed("liger_kernel"), backend=backend,
               fla=installed("fla"), causal_conv1d=installed("causal_conv1d"))


FLA_EXTRA = "pip install 'qlora-app[fla]'"  # flash-linear-attention and causal-conv1d
FLA_COST = "a pure-torch path public reports put at 10-50x slower per step"


def linear_kernels(layers: int, env: Env) -> tuple[str | None, str | None]:
    """(what a model's ``layers`` linear-attention layers run on, a line for the plan or None). transformers runs
    Gated DeltaNet layers through flash-linear-attention's kernels and causal-conv1d's convolution when both import,
    and otherwise, silently, on its pure-torch path; the kernels are CUDA-only, so a CPU run has nothing to miss."""
    if not layers:
        return None, None
    if not env.cuda:
        return "pure torch (CPU: the kernels are CUDA-only)", None
    missing = [n for n, ok in (("flash-linear-attention", env.fla), ("causal-conv1d", env.causal_conv1d)) if not ok]
    if not missing:
        return "flash-linear-attention + causal-conv1d", None
    return "pure torch (missing " + " and ".join(missing) + ")", (
        f"this model's {layers} linear-attention layers need {' and '.join(missing)} on a CUDA GPU, not installed "
        f"here: without them transformers runs those layers on {FLA_COST}; {FLA_EXTRA} where it trains")


CPU_COPY_SHARE = 0.25  # a dense fp32 copy may take at most this share of the machine's memory on auto


def pick_sampler(setting: str, *, cuda: bool, vllm: bool, backend: str, fsdp: bool, copy_fits: bool) -> str:
    """'merged' or 'plain' for grpo.sampler (auto / merged / plain)."""
    other = "vLLM" if vllm else "the Unsloth backend" if backend == "unsloth" else "FSDP" if fsdp else None
    if other:
        if setting == "merged":
            raise UserError(f"grpo.sampler=merged does not combine with {other}, which samples its own way; "
                            "leave grpo.sampler on auto")
        return "plain"
    if setting == "auto":
        return "merged" if copy_fits else "plain"
    return setting


def cpu_copy_fits(params: int | None) -> bool:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return False
    return bool(params) and params * 4 <= CPU_COPY_SHARE * total


def _pick(setting: bool | None, key: str, env: Env, library: str, installed: bool) -> bool:
    """auto -> on where it can run; true -> on, or a UserError naming what is missing; false -> off."""
    usable = env.cuda and installed and env.backend != "unsloth"
    if setting is None:
        return usable
    if setting and not usable:
        if not env.cuda:
            why = "needs a CUDA GPU and this run is on the CPU"
        elif env.backend == "unsloth":
            why = "does not combine with the Unsloth backend (it brings its own); use runtime.backend=hf"
        else:
            why = f"needs the {library} package: pip install {library}"
        raise UserError(f"{key}=true {why}; leave {key} empty (auto) or set it to false")
    return bool(setting)


def pick_vllm(setting: bool | None, env: Env) -> bool:
    return _pick(setting, "grpo.use_vllm", env, "vllm", env.vllm)


def pick_liger(setting: bool | None, env: Env) -> bool:
    return _pick(setting, "training.use_liger_kernel", env, "liger-kernel", env.liger)


def pick_offloading(setting: bool | None, offers: bool, env: Env, needs_room: bool = False) -> bool:
    """Activation offloading, where TRL ``offers`` it for the method (SFT, DPO, ...; not GRPO); auto only when the
    run would not fit without it."""
    if setting and not offers:
        raise UserError("training.activation_offloading=true is an SFT / DPO option (TRL's GRPO has none); leave it "
                        "empty")
    if setting is None:
        return offers and env.cuda and env.backend != "unsloth" and needs_room
    return _pick(setting, "training.activation_offloading", env, "torch", True)


@dataclass(frozen=True)
class FastPaths:
    vllm: bool
    liger: bool
    offloading: bool
    steps_per_generation: int | None  # None for SFT, or when training.extra_args sets TRL's own knobs
    completions_at_once: int | None = None
    optimizer_steps_per_generation: int | None = None
    sampler: str = "plain"  # GRPO: "merged" = a dense copy with LoRA merged (app/train/methods/sampler.py)
    cuda: bool = False
    compiled: bool = False  # the merged copy samples through torch.compile (CUDA)
    linear_kernels: str | None = None  # a model with linear-attention layers: what they run on (linear_kernels)

    def describe(self) -> str:
        """One line for doctor, --dry-run, the run log and status.json."""
        merged = "sampling from a merged " + ("16-bit copy" if self.cuda else "dense copy") + (
            ", compiled" if self.compiled else "")
        on = [n for n, v in (("vLLM colocate generation", self.vllm), (merged, self.sampler == "merged"),
                             ("Liger kernels", self.liger), ("activation offloading", self.offloading)) if v]
        gen = (f"; {self.completions_at_once} completions sampled at once for {self.optimizer_steps_per_generation} "
               "optimizer step(s)" if self.completions_at_once else "")
        linear = f"; linear attention on {self.linear_kernels}" if self.linear_kernels else ""
        return (", ".join(on) or "no GPU fast paths") + gen + linear


def decide(cfg, env: Env, needs_room: bool = False, copy_fits: bool = False, linear_layers: int = 0) -> FastPaths:
    """Every fast-path decision for a resolved AppConfig on this machine. ``copy_fits``: whether a dense copy of
    the weights for the merged sampler fits (the caller's memory check); ``linear_layers``: the model's
    linear-attention layers (app.model.shape.linear_attention_layers)."""
    t, g = cfg.training, cfg.grpo
    method = method_of(cfg)
    vllm = pick_vllm(g.use_vllm, env) if method.rewarded else False
    if not method.rewarded and g.use_vllm:
        raise UserError(f"grpo.use_vllm=true only applies to method grpo; leave it empty for {cfg.method.upper()}")
    spg = at_once = per_gen = None
    sampler = "plain"
    if method.rewarded:  # GRPO's samplers and its generation batch
        sampler = pick_sampler(g.sampler, cuda=env.cuda, vllm=vllm, backend=env.backend, fsdp=cfg.runtime.fsdp,
                               copy_fits=copy_fits)
        explicit = "steps_per_generation" in t.extra_args or "generation_batch_size" in t.extra_args
        spg = None if explicit else steps_per_generation(
            t.per_device_train_batch_size, t.gradient_accumulation_steps, g.generation_batch_size, g.num_generations)
        if spg:
            at_once, per_gen = t.per_device_train_batch_size * spg, max(1, spg // t.gradient_accumulation_steps)
    return FastPaths(vllm=vllm, liger=pick_liger(t.use_liger_kernel, env),
                     offloading=pick_offloading(t.activation_offloading, method.offloading, env, needs_room),
                     steps_per_generation=spg, completions_at_once=at_once, optimizer_steps_per_generation=per_gen,
                     sampler=sampler, cuda=env.cuda, compiled=sampler == "merged" and env.cuda,
                     linear_kernels=linear_kernels(linear_layers, env)[0])


def fit_generation_to_data(fp: FastPaths, cfg, num_prompts: int, world: int = 1, note=None) -> FastPaths:
    """TRL samples whole generation batches of distinct prompts and drops an incomplete one, so a dataset with
    fewer prompts than one batch trains nothing at all (and says only "not a single sample", then "finished").
    The auto batch shrinks to what the data holds (down to one optimizer step's); a single optimizer step that needs
    more prompts than there are is a user error."""
    t, g = cfg.training, cfg.grpo
    per_micro = t.per_device_train_batch_size * world  # completions per micro-batch, all processes together
    step_prompts = per_micro * t.gradient_accumulation_steps // g.num_generations
    if step_prompts > num_prompts:
        raise UserError(f"one GRPO step takes {step_prompts} prompts (per_device_train_batch_size x processes x "
                        f"gradient_accumulation_steps / num_generations) and the training data has {num_prompts}; "
                        "lower training.gradient_accumulation_steps or per_device_train_batch_size, or add rows")
    if fp.steps_per_generation is None:  # TRL's own knobs in training.extra_args: as the user set them
        return fp
    gen_prompts = per_micro * fp.steps_per_generation // g.num_generations
    if gen_prompts <= num_prompts:
        return fp
    if g.generation_batch_size is not None:
        raise UserError(f"grpo.generation_batch_size={g.generation_batch_size} samples {gen_prompts} prompts at a "
                        f"time and the training data has {num_prompts}; lower it or leave it empty (auto)")
    steps = max(k for k in range(1, fp.optimizer_steps_per_generation + 1) if step_prompts * k <= num_prompts)
    spg = t.gradient_accumulation_steps * steps
    if note:
        note(f"the training data has {num_prompts} prompts: sampling {step_prompts * steps} at a time "
             f"({steps} optimizer step(s)' worth), not {gen_prompts}")
    return replace(fp, steps_per_generation=spg, completions_at_once=t.per_device_train_batch_size * spg,
                   optimizer_steps_per_generation=steps)


def trl_kwargs(fp: FastPaths, cfg) -> dict:
    """The TRL (SFTConfig / DPOConfig / GRPOConfig) arguments for the decided fast paths."""
    kw: dict = {"use_liger_kernel": fp.liger}
    if not method_of(cfg).rewarded:
        kw["activation_offloading"] = fp.offloading
        return kw
    kw["use_vllm"] = fp.vllm
    if fp.vllm:
        # colocate: vLLM shares this process and GPU (one consumer GPU has no second one for a vLLM server); it
        # sleeps during the backward pass so the trainer gets its memory back.
        kw.update(vllm_mode="colocate", vllm_gpu_memory_utilization=cfg.grpo.vllm_gpu_memory_utilization,
                  vllm_enable_sleep_mode=True)
    if fp.steps_per_generation is not None:
        kw["steps_per_generation"] = fp.steps_per_generation
    return kw
