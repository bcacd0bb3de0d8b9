"""Memory before the model loads (and before any model download): will the run fit this GPU, and what it must give
up to fit. Called by app.train.planning.plan, which owns every decision; these are its memory steps.

The memory estimate uses the data's own token lengths (tokenized with the model's tokenizer when it is already on
disk, else about 4 characters per token), and on a GPU a run the estimate says cannot fit is refused with the knobs
that would make it fit (runtime.fit_check=false / --no-fit-check tries anyway). vLLM needs a 16-bit copy of the
weights beside the 4-bit base: when auto picked it and that copy does not fit, the run says so and samples with the
4-bit model instead. SFT activation offloading turns on by itself when only it makes the run fit, and GRPO's auto
generation batch shrinks to what the GPU holds.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, replace

from app.config.build import with_values
from app.config.methods import method_of
from app.data.convert import completion_text, prompt_text
from app.data.images import undecoded
from app.data.preference import pair_of
from app.errors import UserError
from app.train.planning.batching import steps_per_generation
from app.train.planning.experts import on_auto
from app.train.planning.fastpaths import Env, cpu_copy_fits
from app.train.planning.images import row_image_tokens
from app.train.planning.memory import Decisions, an, estimate_memory, fit_changes, fit_problem

log = logging.getLogger("qlora_app")
CHARS_PER_TOKEN = 4  # English BPE, when the tokenizer is not on disk yet
LENGTH_SAMPLE = 2000


def token_lengths(cfg, rows, det, tok, extra_text: str = "", vision=None) -> list[int] | None:
    """Token lengths of (up to LENGTH_SAMPLE) training rows: whole examples for SFT, prompts for GRPO, the prompt
    and the longer answer for DPO (both answers are padded to it), counted with the model's tokenizer ``tok`` (None:
    not on disk yet, characters / CHARS_PER_TOKEN). ``extra_text``: what the template adds to every prompt beyond the
    system prompt (a tool run's tool schemas)."""
    if rows is None or det is None or not len(rows):
        return None
    n = min(len(rows), LENGTH_SAMPLE)
    rows = undecoded(rows)  # a row's text and how many pictures it has: none of them decoded
    texts = []
    kind = method_of(cfg).rows
    for i in range(n):
        row = rows[i]
        text = prompt_text(row, det) + (cfg.data.system_prompt or "") + extra_text
        if kind == "pair" or (kind == "labelled" and det.format == "preference"):
            pair = pair_of(row, det)
            text += max(pair.chosen, pair.rejected, key=len) if pair else ""
        elif kind in ("conversation", "labelled"):  # the reference answer; an unpaired answer, good or bad
            text += completion_text(row, det) or ""
        texts.append(text)
    overhead = 12  # chat-template tokens around the turns
    pictures = [row_image_tokens(vision, rows[i]) for i in range(n)] if vision else [0] * n
    if tok is None:
        return [len(t) // CHARS_PER_TOKEN + overhead + k for t, k in zip(texts, pictures)]
    return [len(ids) + overhead + k for ids, k in zip(tok(texts, add_special_tokens=False)["input_ids"], pictures)]


@dataclass(frozen=True)
class MemoryFit:
    changes: dict  # the config changes fitting decided ({dotted key: value}): a smaller generation batch, offloading
    env: Env  # vLLM dropped where its copy would not fit
    needs_room: bool  # SFT: only activation offloading makes it fit
    copy_fits: bool  # GRPO: a dense copy of the weights for the merged sampler fits
    fitted: bool = False  # fitting this card changed a setting or dropped a fast path (its verdict: fits with changes)
    experts_4bit: bool = False  # a MoE model's experts on auto made 4-bit: 16-bit they would not fit


def fit_memory(cfg, lengths, env: Env, gpu_gb: float | None, say, base: Decisions) -> MemoryFit:
    """Refuse a run that cannot fit this GPU (UserError), or return what fitting it changes. ``base``: the plan's
    decisions so far (dtype, packing); the sampler's copy is counted when grpo.sampler=merged asks for it, and on
    auto only where it fits beside the rest. ``say(line)`` hears each change."""
    cuda = env.cuda
    changes: dict = {}
    base = replace(base, sampler="merged" if cfg.grpo.sampler == "merged" else "plain")
    est = estimate_memory(cfg, lengths, base)
    needs_room = False
    problem = fit_problem(est, cfg, gpu_gb) if cuda else None
    experts_4bit = bool(problem) and _experts_on_auto(cfg, base)
    if experts_4bit:  # the plan's own choice for a MoE model, not a step down: the experts as a QLoRA run wants them
        four = with_values(cfg, {"model.quantize_experts": True})
        est4 = estimate_memory(four, lengths, base)
        say(f"the experts load in 4-bit, each quantized as it is read: with them in 16-bit the run needs "
            f"{est['total_gb']:.1f} GB, more than this {gpu_gb:.0f} GB GPU; in 4-bit {est4['total_gb']:.1f} GB "
            "(model.quantize_experts sets it)")
        changes["model.quantize_experts"] = True
        cfg, est = four, est4
        problem = fit_problem(est, cfg, gpu_gb)
    method = method_of(cfg)
    if problem and method.offloading and cfg.training.activation_offloading is None:
        if fit_problem(estimate_memory(cfg, lengths, replace(base, offloading=True)), cfg, gpu_gb) is None:
            needs_room, problem = True, None
            if env.backend != "unsloth":  # Unsloth's own checkpointing offloads activations already
                say("activation offloading is on: only with it does the run fit this "
                    f"{gpu_gb:.0f} GB GPU (training.activation_offloading sets it)")
                changes["training.activation_offloading"] = True
    if problem and method.rewarded:
        smaller = generation_batch_that_fits(cfg, lengths, gpu_gb, base)
        if smaller is not None:
            say(f"sampling {smaller} completions at a time, the most this {gpu_gb:.0f} GB GPU has room for "
                "(grpo.generation_batch_size sets it)")
            changes["grpo.generation_batch_size"] = smaller
            cfg, problem = with_values(cfg, {"grpo.generation_batch_size": smaller}), None
    if problem and cfg.runtime.fit_check:
        raise DoesNotFit(fit_problem(est, cfg, gpu_gb, _floor(cfg, est, lengths, base))
                         + _experts_kept(cfg, base, env.backend), est, gpu_gb)
    copy_fits = False
    if method.rewarded:  # a 16-bit copy of the weights, for vLLM or the merged sampler: does it fit too?
        if cuda and env.vllm and cfg.grpo.use_vllm is None:
            with_vllm = estimate_memory(cfg, lengths, replace(base, sampler="vllm"))
            if fit_problem(with_vllm, cfg, gpu_gb):
                env = dataclasses.replace(env, vllm=False)
                say(f"vLLM is installed but its 16-bit copy of the weights would not fit "
                    f"({with_vllm['total_gb']:.1f} GB estimated on {an(gpu_gb)} GB GPU): not using it")
        with_copy = estimate_memory(cfg, lengths, replace(base, sampler="merged"))
        copy_fits = (fit_problem(with_copy, cfg, gpu_gb) is None) if cuda else cpu_copy_fits(est.get("params"))
        if cuda and not copy_fits and cfg.grpo.sampler == "auto" and not env.vllm:
            say(f"a merged 16-bit copy for fast sampling would not fit ({with_copy['total_gb']:.1f} GB "
                f"estimated on {an(gpu_gb)} GB GPU): sampling with the 4-bit model instead")
    if problem:
        say(problem.replace("; try", " (runtime.fit_check=false: trying anyway); would fit with"))
    dropped = cuda and method.rewarded and cfg.grpo.sampler == "auto" and not copy_fits
    return MemoryFit(changes=changes, env=env, needs_room=needs_room, copy_fits=copy_fits,
                     fitted=bool(set(changes) - {"model.quantize_experts"}) or needs_room or dropped,
                     experts_4bit=experts_4bit)


def _experts_kept(cfg, base: Decisions, backend: str = "hf") -> str:
    """What the refusal of a MoE run adds when its experts stay 16-bit: why, and what makes them 4-bit."""
    mc = cfg.model
    if base.census is None or mc.experts_in_4bit or not mc.load_in_4bit:
        return ""
    why = ("lora.target_experts keeps them so: PEFT wraps them as loaded; drop it and the plan quantizes them"
           if cfg.lora.target_experts else
           "the Unsloth backend loads them so; runtime.backend=hf quantizes them as they load"
           if backend == "unsloth" and cfg.runtime.backend == "unsloth"
           else "model.quantize_experts=false; leave it empty and the plan quantizes them")
    return f" (its experts are 16-bit: {why})"


def _experts_on_auto(cfg, base: Decisions) -> bool:
    """A MoE model's experts whose precision is the plan's to choose: model.quantize_experts empty, a 4-bit run,
    no LoRA on them (PEFT wraps them in 16-bit)."""
    return base.census is not None and on_auto(cfg)


class DoesNotFit(UserError):
    """The fit check's refusal: the one line, and the estimate behind it (`train --dry-run --json` shows it)."""

    def __init__(self, line: str, estimate: dict, gpu_gb: float):
        super().__init__(line)
        self.estimate, self.gpu_gb = estimate, gpu_gb


def _floor(cfg, est: dict, lengths, base: Decisions) -> float | None:
    """The estimate with every change fit_changes lists (the least this run can take short of another model), or
    None when those changes do not make a valid config together."""
    try:
        low = with_values(cfg, fit_changes(est, cfg))
    except UserError:
        return None
    offloading = method_of(cfg).offloading  # where TRL offers it, the floor has it on
    return estimate_memory(low, lengths, replace(base, sampler="plain", offloading=offloading))["total_gb"]


def generation_batch_that_fits(cfg, lengths, gpu_gb: float, base: Decisions) -> int | None:
    """On auto, GRPO samples several optimizer steps' completions at once; where that does not fit the GPU, the
    largest generation batch (completions) of whole optimizer steps that does (down to one step's), or None."""
    t = cfg.training
    if cfg.grpo.generation_batch_size is not None or {"steps_per_generation", "generation_batch_size"} & set(
            t.extra_args):
        return None
    per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps
    auto_steps = steps_per_generation(t.per_device_train_batch_size, t.gradient_accumulation_steps, None,
                                      cfg.grpo.num_generations) // t.gradient_accumulation_steps
    for steps in range(auto_steps - 1, 0, -1):
        trial = with_values(cfg, {"grpo.generation_batch_size": per_step * steps})
        if fit_problem(estimate_memory(trial, lengths, base), trial, gpu_gb) is None:
            return per_step * steps
    return None
