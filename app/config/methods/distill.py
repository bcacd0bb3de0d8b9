"""Distillation: the student learns from a stronger teacher's next-token distributions on its own samples (on-policy),
or SFT on the teacher's greedy answers (off-policy); the teacher runs beside it."""

from __future__ import annotations

from app.config.methods.base import Method


class Distill(Method):
    name = "distill"
    learns_from = "learn from a stronger teacher model's next-token distributions on prompts (distillation)"
    words = "distillation"
    # a target on every token of every answer, as SFT's, but on the student's own samples: SFT's LoRA rate halved
    # (the answers move with the adapter), rank as RL's small one (it learns one behaviour: the teacher's)
    learning_rate = 1e-4
    rows = "prompt"
    section = "distill"
    shadowed = True  # its keys take TRL's names, GRPO's: a bare key is GRPO's elsewhere
    samples = teacher = True
    demo = "teacher"

    def card_line(self, cfg, named) -> str:
        d = cfg.distill
        if d.outside:
            where = "a GGUF file run by llama.cpp" if d.outside == "gguf" else "an OpenAI-compatible endpoint"
            return (f"- distillation ({d.mode.replace('_', '-')}) from teacher {named(d.teacher, 'model')} ({where}, "
                    f"outside the training process): its top-{d.top_k} log-probabilities per answer token, beta "
                    f"{d.beta:g} (0 forward KL, 1 reverse KL), answers up to {d.max_completion_length} tokens")
        return (f"- distillation ({d.mode.replace('_', '-')}) from teacher {named(d.teacher, 'model')}"
                + f" ({'4' if d.teacher_4bit else '16'}-bit)"
                + (f": beta {d.beta:g} (0 forward KL, 1 reverse KL), temperature {d.temperature:g}"
                   if d.mode == "on_policy" else ": SFT on the teacher's greedy answers")
                + f", answers up to {d.max_completion_length} tokens")


METHOD = Distill()
