"""Before the model loads (and before any model download): will the run fit this GPU, and which fast paths it takes.

The memory estimate uses the data's own token lengths (tokenized with the model's tokenizer when it is already on
disk, else about 4 characters per token), and on a GPU a run the estimate says cannot fit is refused with the knobs
that would make it fit (runtime.fit_check=false / --no-fit-check tries anyway). vLLM needs a 16-bit copy of the
weights beside the 4-bit base: when auto picked it and that copy does not fit, the run says so and samples with the
4-bit model instead. SFT activation offloading turns on by itself when only it makes the run fit.
"""

from __future__ import annotations

import dataclasses
import logging

from app.errors import UserError
from app.memory import estimate_memory, fit_problem
from app.train.fastpaths import decide, detect_env
from app.train.sampler import cpu_copy_fits

log = logging.getLogger("qlora_app")
CHARS_PER_TOKEN = 4  # English BPE, when the tokenizer is not on disk yet
LENGTH_SAMPLE = 2000


def token_lengths(cfg, rows, det) -> list[int] | None:
    """Token lengths of (up to LENGTH_SAMPLE) training rows: whole examples for SFT, prompts for GRPO."""
    if rows is None or det is None or not len(rows):
        return None
    from app.data.convert import completion_text, prompt_text

    n = min(len(rows), LENGTH_SAMPLE)
    texts = []
    for i in range(n):
        row = rows[i]
        text = prompt_text(row, det) + (cfg.data.system_prompt or "")
        if cfg.method == "sft":
            text += completion_text(row, det) or ""
        texts.append(text)
    tok = _local_tokenizer(cfg)
    overhead = 12  # chat-template tokens around the turns
    if tok is None:
        return [len(t) // CHARS_PER_TOKEN + overhead for t in texts]
    return [len(ids) + overhead for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def _local_tokenizer(cfg):
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(cfg.model.name_or_path, local_files_only=True,
                                             revision=cfg.model.revision, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - not on disk (yet), or a custom tokenizer: fall back to characters
        return None


def preflight(cfg, rows=None, det=None, note=None) -> dict:
    """{'estimate', 'fast', 'cuda', 'gpu_gb'} for a resolved config; raises UserError when it cannot fit."""
    from app.models import pick_backend, unsloth_installed
    from app.runtime import device_facts

    facts = device_facts(cfg.runtime.device)
    cuda, gpu_gb = facts["cuda"], facts["vram_gb"]
    backend = pick_backend(cfg.runtime.backend, cuda, unsloth_installed())
    env = detect_env(cuda, backend)
    from app.unsloth_backend import stack_problem

    stack = stack_problem(cfg.method, cuda)
    if stack:
        raise UserError(stack)
    lengths = token_lengths(cfg, rows, det)
    # GPU memory by definition (on a CPU run: what the same config would need on a GPU; the CPU's own peak is
    # recorded as it trains)
    est = estimate_memory(cfg, lengths)
    needs_room = False
    problem = fit_problem(est, cfg, gpu_gb) if cuda else None
    if problem and cfg.method == "sft" and cfg.training.activation_offloading is None:
        offloaded = cfg.model_copy(deep=True)
        offloaded.training.activation_offloading = True
        if fit_problem(estimate_memory(offloaded, lengths), offloaded, gpu_gb) is None:
            needs_room, problem = True, None
    if problem and cfg.method == "grpo":
        smaller = generation_batch_that_fits(cfg, lengths, gpu_gb)
        if smaller is not None:
            _say(note, f"sampling {smaller.grpo.generation_batch_size} completions at a time, the most this "
                       f"{gpu_gb:.0f} GB GPU has room for (grpo.generation_batch_size sets it)")
            cfg, est, problem = smaller, estimate_memory(smaller, lengths), None
    if problem and cfg.runtime.fit_check:
        raise UserError(problem)
    copy_fits = False
    if cfg.method == "grpo":  # a 16-bit copy of the weights, for vLLM or the merged sampler: does it fit too?
        if cuda and env.vllm and cfg.grpo.use_vllm is None:
            with_vllm = estimate_memory(cfg, lengths, weight_copy="vllm")
            if fit_problem(with_vllm, cfg, gpu_gb):
                env = dataclasses.replace(env, vllm=False)
                _say(note, f"vLLM is installed but its 16-bit copy of the weights would not fit "
                           f"({with_vllm['total_gb']:.1f} GB estimated on a {gpu_gb:.0f} GB GPU): not using it")
        with_copy = estimate_memory(cfg, lengths, weight_copy="merged")
        copy_fits = (fit_problem(with_copy, cfg, gpu_gb) is None) if cuda else cpu_copy_fits(est.get("params"))
        if cuda and not copy_fits and cfg.grpo.sampler == "auto" and not env.vllm:
            _say(note, f"a merged 16-bit copy for fast sampling would not fit ({with_copy['total_gb']:.1f} GB "
                       f"estimated on a {gpu_gb:.0f} GB GPU): sampling with the 4-bit model instead")
    fast = decide(cfg, env, needs_room, copy_fits=copy_fits)
    if problem:
        _say(note, problem.replace("; try", " (runtime.fit_check=false: trying anyway); would fit with"))
    return {"estimate": est, "fast": fast, "cuda": cuda, "gpu_gb": gpu_gb, "lengths_known": lengths is not None}


def generation_batch_that_fits(cfg, lengths, gpu_gb: float):
    """On auto, GRPO samples several optimizer steps' completions at once; where that does not fit the GPU, the
    config sampling the most optimizer steps' worth that does (down to one step's), or None."""
    from app.train.fastpaths import steps_per_generation

    t = cfg.training
    if cfg.grpo.generation_batch_size is not None or {"steps_per_generation", "generation_batch_size"} & set(
            t.extra_args):
        return None
    per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps
    auto_steps = steps_per_generation(t.per_device_train_batch_size, t.gradient_accumulation_steps, None,
                                      cfg.grpo.num_generations) // t.gradient_accumulation_steps
    for steps in range(auto_steps - 1, 0, -1):
        trial = cfg.model_copy(deep=True)
        trial.grpo.generation_batch_size = per_step * steps
        if fit_problem(estimate_memory(trial, lengths), trial, gpu_gb) is None:
            return trial
    return None


def _say(note, line: str) -> None:
    log.warning(line)
    if note:
        note(line)


def describe(pf: dict) -> str:
    """Two short lines for --dry-run and the run log."""
    est = pf["estimate"]
    where = f"on this {pf['gpu_gb']:.0f} GB GPU" if pf["gpu_gb"] else "for a GPU (this run is on the CPU)"
    basis = "the data's token lengths" if pf["lengths_known"] else "max_length (data not read)"
    return (f"memory estimate {where}: {est['summary']} (from {basis})\n"
            f"fast paths: {pf['fast'].describe()}")
