"""The top-k loss: on the full vocabulary it is the exact divergence (forward KL, reverse KL, JSD), on a sparse
support it still points the student at the teacher, and the answer's own token joins the support."""

import pytest
import torch

from app.teacher.client import Scored
from app.teacher.topk import teacher_tensors, topk_divergence


def _pair(seed=0, b=2, t=3, v=7):
    g = torch.Generator().manual_seed(seed)
    student = torch.randn(b, t, v, generator=g).log_softmax(-1)
    teacher = torch.randn(b, t, v, generator=g).log_softmax(-1)
    answer = torch.randint(0, v, (b, t), generator=g)
    return student, teacher, answer


def _full(student, teacher, beta):
    p_s, p_t = student.exp(), teacher.exp()
    if beta == 0:
        return (p_t * (teacher - student)).sum(-1)
    if beta == 1:
        return (p_s * (student - teacher)).sum(-1)
    m = (beta * p_t + (1 - beta) * p_s).log()
    return beta * (p_t * (teacher - m)).sum(-1) + (1 - beta) * (p_s * (student - m)).sum(-1)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_with_every_token_in_the_support_it_is_the_exact_divergence(beta):
    student, teacher, answer = _pair()
    v = student.size(-1)
    top_lps, top_ids = teacher.sort(-1, descending=True)
    token_lps = teacher.gather(-1, answer.unsqueeze(-1)).squeeze(-1)
    mask = torch.ones(answer.shape)
    got = topk_divergence(student, answer, top_ids[..., :v], top_lps[..., :v], token_lps, mask, beta)
    assert torch.allclose(got, _full(student, teacher, beta), atol=1e-5)


def test_a_sparse_support_moves_the_student_to_the_teacher():
    """Gradient steps on the top-3 loss (with the tail) bring the student's full distribution closer to the
    teacher's: the full KL falls."""
    _, teacher, answer = _pair(seed=1, v=12)
    logits = torch.zeros(teacher.shape, requires_grad=True)
    top_lps, top_ids = teacher.sort(-1, descending=True)
    token_lps = teacher.gather(-1, answer.unsqueeze(-1)).squeeze(-1)
    mask = torch.ones(answer.shape)
    opt = torch.optim.SGD([logits], lr=1.0)
    before = _full(logits.detach().log_softmax(-1), teacher, 0.0).mean().item()
    for _ in range(60):
        opt.zero_grad()
        loss = topk_divergence(logits.log_softmax(-1), answer, top_ids[..., :3], top_lps[..., :3], token_lps,
                               mask, 0.0).sum()
        loss.backward()
        opt.step()
    after = _full(logits.detach().log_softmax(-1), teacher, 0.0).mean().item()
    assert after < 0.5 * before


def test_masked_positions_count_nothing_and_the_answer_token_joins_the_support():
    student, teacher, answer = _pair(seed=2)
    top_lps, top_ids = teacher.sort(-1, descending=True)
    # the answer's token is made the least likely: outside any top-2
    answer = top_ids[..., -1]
    token_lps = teacher.gather(-1, answer.unsqueeze(-1)).squeeze(-1)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    with_own = topk_divergence(student, answer, top_ids[..., :2], top_lps[..., :2], token_lps, mask, 1.0)
    unknown = torch.full_like(token_lps, float("-inf"))
    without = topk_divergence(student, answer, top_ids[..., :2], top_lps[..., :2], unknown, mask, 1.0)
    assert (with_own[mask == 0] == 0).all() and (without[mask == 0] == 0).all()
    assert torch.isfinite(with_own).all() and not torch.allclose(with_own[mask == 1], without[mask == 1])


def test_teacher_tensors_pad_short_answers_and_short_top_lists():
    rows = [Scored([5, 6], [-0.1, -0.2], [[5, 1], [6]], [[-0.1, -2.0], [-0.2]]), Scored([], [], [], [])]
    t = teacher_tensors(rows, 3, 2)
    assert t["teacher_top_ids"].shape == (2, 3, 2) and t["teacher_lps"].shape == (2, 3)
    assert t["teacher_top_ids"][0, 0].tolist() == [5, 1] and t["teacher_top_lps"][0, 1, 1] == float("-inf")
    assert t["teacher_lps"][0, :2].tolist() == pytest.approx([-0.1, -0.2])
    assert torch.isinf(t["teacher_lps"][0, 2]) and torch.isinf(t["teacher_top_lps"][1]).all()
