"""GRPO sampling from a dense copy of the policy: the 4-bit base dequantized with the current LoRA merged in.

Sampling a 4-bit + LoRA model decodes one token at a time through ~200 small kernels per layer stack (dequantize,
matmul, two LoRA matmuls, add): on a GPU that is launch-bound (issue #16: 96 ms per decode step on an H100 for a
1.5B model, 28 ms for a merged 16-bit copy, 5.9 ms with a static KV cache and torch.compile), and on a CPU every
step pays the 4-bit dequantization again. So the sampler keeps one dense copy (compute dtype: bf16 / fp16 on a
GPU = 2 bytes per linear-layer parameter, counted by the fit check; fp32 on a CPU; embeddings, norms and the LM
head are shared with the trainer, not copied) and, after every optimizer step, rewrites
each adapted weight in place as dequantize(4-bit base) + PEFT's own delta (B @ A x scale). In place, so a
compiled graph (CUDA: static cache + torch.compile through transformers' generate) stays valid. Sampling thus
always uses the policy being trained (tested: the copy's and the trainer's log-probs agree after training steps).

grpo.sampler: auto = merged where the copy fits (GPU: the fit check with the copy; CPU: a quarter of RAM), else
plain (TRL's own generate on the training model). vLLM, Unsloth and FSDP bring or need their own generation.
"""

from __future__ import annotations

import logging

from app.model.generation import no_router_loss
from app.train.planning.batching import PROMPT_MULTIPLE
from app.train.planning.oom import is_oom

log = logging.getLogger("qlora_app")


class MergedSampler:
    """A dense copy of a PEFT model's base with its LoRA merged, kept in sync with the trainer's weights."""

    def __init__(self, peft_model, dtype, compile: bool = False):
        import torch
        from peft.tuners.lora import LoraLayer
        from transformers import AutoModelForCausalLM

        base = peft_model.get_base_model()
        device = next(p.device for p in base.parameters())
        with torch.device("meta"):  # a skeleton: only the linear layers get storage of their own below
            self.model = AutoModelForCausalLM.from_config(base.config, dtype=dtype,
                                                          attn_implementation=base.config._attn_implementation)
        self.model.eval().requires_grad_(False)
        self.model.generation_config = base.generation_config
        self.dtype, self.compile = dtype, compile
        self.adapted = []  # (dense Linear, PEFT LoRA layer): rewritten on every sync
        with torch.no_grad():
            for name, dense in self.model.named_modules():
                src = base.get_submodule(name) if name else base
                lora = isinstance(src, LoraLayer)
                if lora or (name and _is_4bit(getattr(src, "weight", None))):
                    layer = src.get_base_layer() if lora else src
                    dense.weight = _frozen(torch.empty(dense.weight.shape, dtype=dtype, device=device))
                    if layer.bias is not None:
                        dense.bias = _frozen(layer.bias.detach().to(dtype))
                    if lora:
                        self.adapted.append((dense, src))
                    else:  # a 4-bit layer without an adapter (lora.exclude_modules): dense once, never changes
                        dense.weight.copy_(_dequantize(src.weight).to(dtype))
                    continue
                # Embeddings, norms, the LM head, rotary tables: frozen in training, so the copy shares the
                # trainer's own tensors (no second copy of a large vocabulary) where the dtype already matches.
                for pname, _ in list(dense.named_parameters(recurse=False)):
                    t = getattr(src, pname)
                    dense._parameters[pname] = t if t.dtype == dtype else _frozen(t.detach().to(dtype))
                for bname, _ in list(dense.named_buffers(recurse=False)):
                    dense._buffers[bname] = getattr(src, bname)
        left = [n for n, t in [*self.model.named_parameters(), *self.model.named_buffers()] if t.is_meta]
        if left:
            raise RuntimeError(f"merged sampler: no weights for {left[:5]} (an architecture this copy cannot mirror); "
                               "set grpo.sampler=plain")
        self.synced_step: int | None = None
        self.syncs = 0

    def sync(self, step: int | None = None) -> bool:
        """Rewrite every adapted weight from the trainer's current 4-bit base + LoRA; once per optimizer step."""
        import torch

        if step is not None and step == self.synced_step:
            return False
        with torch.no_grad():
            for dense, lora in self.adapted:
                # a copy: for a base loaded without 4-bit this is the trainer's own weight, which must not change
                w = _dequantize(lora.get_base_layer().weight).to(torch.float32, copy=True)
                for name in lora.active_adapters:
                    if name in lora.lora_A:
                        w += lora.get_delta_weight(name).to(torch.float32)
                dense.weight.copy_(w.to(self.dtype))
        self.synced_step, self.syncs = step, self.syncs + 1
        return True

    def generate(self, prompt_ids: list[list[int]], generation_config, pad_id: int, eos_ids: list[int]):
        """Completion token lists (cut after the first EOS, which is kept), as TRL's own path returns them."""
        import copy

        import torch

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompt_ids)
        if self.compile:
            width = -(-width // PROMPT_MULTIPLE) * PROMPT_MULTIPLE
        ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompt_ids):  # left padding: every prompt ends where generation starts
            ids[i, width - len(p):] = torch.tensor(p, device=device)
            mask[i, width - len(p):] = 1
        cfg = copy.deepcopy(generation_config)
        if self.compile:  # transformers compiles the decoding step for a static cache
            cfg.cache_implementation, cfg.disable_compile = "static", False
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                                      **no_router_loss(self.model))
        completions = []
        for row in out[:, width:].tolist():
            cut = next((i for i, t in enumerate(row) if t in eos_ids), None)
            completions.append(row if cut is None else row[:cut + 1])
        return completions


def _frozen(t):
    import torch

    return torch.nn.Parameter(t, requires_grad=False)


def _is_4bit(weight) -> bool:
    return weight is not None and type(weight).__name__ == "Params4bit"


def _dequantize(weight):
    """The dense weight of a (4-bit) parameter, without changing the parameter. bitsandbytes repacks 4-bit weights
    into a CPU kernel layout at the first no-grad eval forward on CPUs with AVX512-BF16 (then its plain dequantize
    reads them wrongly): unpack a copy first."""
    if not _is_4bit(weight):
        return weight.data
    import bitsandbytes.functional as bnbf

    data, state = weight.data, weight.quant_state
    if getattr(state, "packing_format_for_cpu", False):
        import copy

        data, state = bnbf._convert_weight_packed_for_cpu_inverse(data, copy.deepcopy(state))
    return bnbf.dequantize_4bit(data, state)


def sampling_trainer(cls):
    """``cls`` (a GRPOTrainer) sampling from ``trainer.merged_sampler`` when one is attached: text prompts through
    transformers' generate, a tool run's rounds after the tools' results included (TRL's tool loop calls this with
    the grown sequences); vLLM and images keep TRL's own path. A failure of the fast path never ends
    the run: the compiled copy falls back to the uncompiled one, that one to TRL's own sampling, each said once."""

    class SamplingTrainer(cls):
        merged_sampler: MergedSampler | None = None
        # called with the sampler left (None: TRL's own path) and the reason, when the fast path steps down, so
        # the run directory can record the plan that now runs (app.train.running.session)
        on_sampler_change = None
        faults = None  # app.train.planning.oom.Faults: QLORA_APP_FAULT's injected out-of-memory errors

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            if self.faults is not None:
                self.faults.generation()
            s = self.merged_sampler
            if s is None or self.use_vllm or images is not None or multimodal_fields or has_tool_images:
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                     has_tool_images)
            tok = self.processing_class
            tok = getattr(tok, "tokenizer", tok)
            try:
                s.sync(self.state.global_step)
                return s.generate(prompt_ids, self.generation_config, tok.pad_token_id, list(self.eos_token_ids)), None
            except Exception as e:  # noqa: BLE001 - any failure of the optional path: step down, keep training
                if is_oom(e):  # out of memory: the run's ladder decides what gives (app/train/planning/oom.py)
                    raise
                self.merged_sampler = fall_back(s, e)
                if self.on_sampler_change:
                    self.on_sampler_change(self.merged_sampler, f"{type(e).__name__} at step {self.state.global_step}")
                return self._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                  has_tool_images)

    SamplingTrainer.__name__ = SamplingTrainer.__qualname__ = f"Sampling{cls.__name__}"
    return SamplingTrainer


def fall_back(s: MergedSampler, error: BaseException) -> MergedSampler | None:
    """The next sampler down after ``error``: the same copy uncompiled, or None (TRL's own path)."""
    what = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    if s.compile:
        log.warning("compiled sampling failed (%s); sampling from the merged copy without compiling", what)
        s.compile = False
        return s
    log.warning("sampling from the merged copy failed (%s); sampling with the training model instead "
                "(grpo.sampler=plain skips the copy)", what)
    s.model = None  # free the copy
    return None
