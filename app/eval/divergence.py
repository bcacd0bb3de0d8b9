"""How far a student is from its teacher on held-out rows: the mean per-token reverse KL (student || teacher, what
on-policy distillation minimises with distill.beta 1) over the student's own greedy answers to fixed prompts. The
held-out evaluation of a distillation run logs it at each point (eval/divergence), beside the accuracy: TRL's
training loss is measured on fresh samples each step and moves with what was sampled; this one is the same rows
each time, so it falls as the student closes on the teacher.

Owns that measure. torch is imported inside the function.
"""

from __future__ import annotations

from app.model.generation import adds_special_tokens


def answer_divergence(student, teacher, tok, prompts: list[str], answers: list[str]) -> float | None:
    """Mean over answer tokens of KL(student || teacher) at each position, the prompts' texts as the model is asked
    (chat template applied) followed by each answer; None when no answer has a token."""
    import torch

    add_special = adds_special_tokens(tok)
    total, count = 0.0, 0
    device = next(student.parameters()).device
    for prompt, answer in zip(prompts, answers):
        p = tok(prompt, add_special_tokens=add_special)["input_ids"]
        a = tok(answer, add_special_tokens=False)["input_ids"]
        if not a:
            continue
        ids = torch.tensor([p + a], device=device)
        with torch.no_grad():
            ls = torch.log_softmax(student(input_ids=ids).logits[0, len(p) - 1:-1].float(), -1)
            lt = torch.log_softmax(teacher(input_ids=ids.to(next(teacher.parameters()).device)).logits[
                0, len(p) - 1:-1].float().to(ls.device), -1)
        rows = min(ls.shape[-1], lt.shape[-1])  # a teacher's head cut to the student's rows has as many
        total += (ls.exp()[:, :rows] * (ls[:, :rows] - lt[:, :rows])).sum().item()
        count += len(a)
    return total / count if count else None
