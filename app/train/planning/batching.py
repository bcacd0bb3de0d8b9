"""How GRPO's completions are batched: how many are sampled at once and how many optimizer steps one generation
batch serves. One home for the rule, read by the memory estimate (app/train/planning/memory.py) and the fast-path
decisions (app/train/planning/fastpaths.py). Standard library only."""

from __future__ import annotations

from app.errors import UserError

# Completions sampled at once by auto: the measured knee on an H100 (issue #16: 64 sequences per decode step cost
# 120 ms vs 96 ms for 8) and, on CPU, where the per-step Python overhead stops dominating (docs/performance.md).
AUTO_GENERATION_SEQUENCES = 64
# Prompt widths a compiled static-cache sampler pads to a multiple of (app/train/methods/sampler.py), so its graph sees
# few shapes; the memory estimate sizes that cache with the same rule.
PROMPT_MULTIPLE = 64
# How many optimizer steps one generation batch may serve: a conservative cap on staleness for the clipped importance
# ratio (measured: the demo's reward curve holds at 2 steps per generation, docs/performance.md; 4 is not measured).
MAX_STEPS_PER_GENERATION = 4


def steps_per_generation(batch: int, accumulation: int, setting: int | None, num_generations: int) -> int:
    """TRL's steps_per_generation for a generation batch of ``setting`` completions (auto: about
    AUTO_GENERATION_SEQUENCES, at most MAX_STEPS_PER_GENERATION optimizer steps' worth). Always a whole number of
    micro-batches and of optimizer steps, so every optimizer step sees fresh groups in the same order."""
    if setting is not None:
        if setting % batch:
            raise UserError(f"grpo.generation_batch_size={setting} must be a multiple of "
                            f"training.per_device_train_batch_size ({batch}); try {max(batch, setting // batch * batch)}")
        if setting % num_generations:
            raise UserError(f"grpo.generation_batch_size={setting} must be a multiple of grpo.num_generations "
                            f"({num_generations}); change one so it divides")
        return setting // batch
    per_step = batch * accumulation
    steps = max(1, min(MAX_STEPS_PER_GENERATION, AUTO_GENERATION_SEQUENCES // per_step))
    return accumulation * steps
