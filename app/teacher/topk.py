"""The student's loss against a teacher known only by its top-k log-probabilities (a GGUF or an endpoint teacher).

Which source: TRL's server distillation (trl.experimental.server_distillation), whose divergence helpers this reads:
at each answer position the support is the teacher's k most likely tokens, and a (k+1)-th "tail" bucket holds each
model's remaining mass, log(1 - sum of the support's probabilities), so the two distributions are proper ones over
k + 1 outcomes (without it a top-1 support gives a zero loss; the sparse-logit KD papers, e.g. Anshumann et al. 2025,
show that top-k with the tail ranks the student like the full KL once k is a few tens). On top of TRL's sparse support
this adds the answer's own token with the teacher's log-probability of it, which the echo returns even outside the
top-k: the token the student sampled is always in the support, so reverse KL (beta 1, the on-policy default) sees the
student's own choice and any beta works on one support (TRL's server path takes beta > 0 on top-1 only).

Owns the teacher's answers as tensors and the divergence. Must not ask the teacher (client.py).
"""

from __future__ import annotations

NEG_INF = float("-inf")


def teacher_tensors(scored: list, length: int, k: int, device=None) -> dict:
    """(B, length, k) top ids / log-probabilities and (B, length) the answer tokens' own log-probabilities (-inf: not
    known) from each row's Scored, its first token at position 0 (the answers right-padded as TRL pads them)."""
    import torch

    b = len(scored)
    top_ids = torch.zeros((b, length, k), dtype=torch.long)
    top_lps = torch.full((b, length, k), NEG_INF, dtype=torch.float32)
    lps = torch.full((b, length), NEG_INF, dtype=torch.float32)
    for i, s in enumerate(scored):
        for j in range(min(length, len(s.ids))):
            ids, vals = s.top_ids[j][:k], s.top_lps[j][:k]
            if ids:
                top_ids[i, j, :len(ids)] = torch.tensor(ids)
                top_lps[i, j, :len(vals)] = torch.tensor(vals)
            if s.lps[j] is not None:
                lps[i, j] = s.lps[j]
    return {"teacher_top_ids": top_ids.to(device), "teacher_top_lps": top_lps.to(device),
            "teacher_lps": lps.to(device)}


def topk_divergence(student_logps, answer_ids, top_ids, top_lps, token_lps, mask, beta: float):
    """Per-position generalized JSD (TRL's: beta 0 forward KL, 1 reverse KL) between student and teacher on the
    teacher's top-k plus the answer's own token, each with a tail bucket. ``student_logps``: (B, T, V) log-softmax;
    ``answer_ids`` (B, T) the answer tokens; ``top_ids`` / ``top_lps`` (B, T, k); ``token_lps`` (B, T) the teacher's
    log-probability of each answer token (-inf: not known); ``mask`` (B, T) the positions that count. Returns the
    (B, T) divergence, 0 where masked."""
    import torch
    from trl.experimental.server_distillation.server_distillation_trainer import _add_tail_bucket, _jsd_divergence

    support = torch.cat([top_ids, answer_ids.unsqueeze(-1)], dim=-1)
    teacher = torch.cat([top_lps, token_lps.unsqueeze(-1)], dim=-1)
    # the answer's token counts once: not where it is among the top-k already, nor where its value is unknown
    own_new = ~(top_ids == answer_ids.unsqueeze(-1)).any(-1) & torch.isfinite(token_lps)
    valid = torch.cat([torch.isfinite(top_lps), own_new.unsqueeze(-1)], dim=-1) & mask.bool().unsqueeze(-1)
    neg_inf = torch.full((), NEG_INF, dtype=student_logps.dtype, device=student_logps.device)
    student = torch.where(valid, student_logps.gather(-1, support), neg_inf)
    teacher = torch.where(valid, teacher.to(student_logps.dtype), neg_inf)
    # a position with no support at all (masked) gets one dummy outcome of probability 1 on both sides: KL 0
    empty = ~valid.any(-1, keepdim=True)
    student = torch.where(empty & (torch.arange(support.size(-1), device=support.device) == 0),
                          torch.zeros((), dtype=student.dtype, device=student.device), student)
    teacher = torch.where(empty & (torch.arange(support.size(-1), device=support.device) == 0),
                          torch.zeros((), dtype=teacher.dtype, device=teacher.device), teacher)
    valid = valid | (empty & (torch.arange(support.size(-1), device=support.device) == 0))
    s_tail, tail_mask = _add_tail_bucket(student, valid)
    t_tail, _ = _add_tail_bucket(teacher, valid)
    jsd = _jsd_divergence(s_tail, t_tail, beta, tail_mask).sum(-1)
    return torch.where(mask.bool(), jsd, torch.zeros_like(jsd))
