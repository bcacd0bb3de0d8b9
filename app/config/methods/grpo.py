"""GRPO: learns from a reward on groups of its own sampled answers (the rollouts), with tools where the run has
them; the reward, the judge, the fast samplers (vLLM, the merged copy) and the reward's diagnoses are its own."""

from __future__ import annotations

from app.config.methods.base import Method

# The prompt suffix that tells a model the answer format the shaped reward's format bonus looks for.
DEFAULT_SYSTEM_PROMPT = (
    "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
)
RL_RANK_WARN = 64  # LoRA Without Regret: RL needs 1-32


class GRPO(Method):
    name = "grpo"
    learns_from = "learn from rewards"
    learning_rate = 3e-5
    rows = "prompt"
    section = "grpo"
    samples = rewarded = True
    pictures = picture_demo = True
    offloading = False  # TRL's GRPO has none
    demo = "rollouts"
    system_prompt = DEFAULT_SYSTEM_PROMPT
    step_unit = "prompts"

    def fill_batch(self, cfg) -> None:
        t = cfg.training
        if t.per_device_train_batch_size is None:
            t.per_device_train_batch_size = cfg.grpo.num_generations
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 2

    def examples_per_step(self, completions: int, cfg) -> int:
        """TRL's batch counts completions; the examples are the prompts (each a group of num_generations)."""
        return max(1, completions // cfg.grpo.num_generations)

    def batch_warnings(self, cfg, effective: int) -> list[str]:
        out = super().batch_warnings(cfg, effective)
        if cfg.lora.r and cfg.lora.r > RL_RANK_WARN:
            out.append(f"lora.r={cfg.lora.r} is far above what RL needs (1-32 is enough); it only costs memory")
        return out

    def check(self, cfg) -> str | None:
        # TRL generates `generation_batch_size` completions at a time (default: per-device batch x accumulation
        # steps) and they must form whole groups of num_generations; caught here, not deep inside TRL.
        t, g = cfg.training, cfg.grpo
        if not (t.per_device_train_batch_size and t.gradient_accumulation_steps):
            return None
        total = g.generation_batch_size or t.extra_args.get("generation_batch_size") or (
            t.per_device_train_batch_size * t.extra_args.get("steps_per_generation", t.gradient_accumulation_steps))
        if not total % g.num_generations:
            return None
        source = ("grpo.generation_batch_size" if g.generation_batch_size
                  else "training.extra_args" if "generation_batch_size" in t.extra_args
                  or "steps_per_generation" in t.extra_args
                  else "per_device_train_batch_size x gradient_accumulation_steps")
        return (f"a generation batch of {total} completions ({source}) is not a multiple of "
                f"grpo.num_generations = {g.num_generations}; change one so it divides")

    def card_line(self, cfg, named) -> str:
        g = cfg.grpo
        weights = ", ".join(f"{k} {v:g}" for k, v in cfg.reward.weights.items())
        return (f"- GRPO: {g.num_generations} completions per prompt, loss {g.loss_type}, up to "
                f"{g.max_completion_length} tokens each; reward weights: {weights}")


METHOD = GRPO()
