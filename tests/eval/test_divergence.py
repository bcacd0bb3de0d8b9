"""The held-out divergence of a distillation run (app/eval/divergence.py): zero for a model against itself,
positive against another model, the same KL torch computes on the answer's positions."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.eval.divergence import answer_divergence


def test_the_divergence_is_the_kl_on_the_answer_tokens(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["llama"])
    a = AutoModelForCausalLM.from_pretrained(tiny_models["llama"]).eval()
    b = AutoModelForCausalLM.from_pretrained(tiny_models["qwen2"]).eval()
    prompts, answers = ["Question: Tom has 3 apples", "Write a short poem"], [" and 4 more.", " about the sea"]
    assert answer_divergence(a, a, tok, prompts, answers) == 0.0
    d = answer_divergence(a, b, tok, prompts, answers)
    p = tok(prompts[0])["input_ids"]
    ids = torch.tensor([p + tok(answers[0], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        ls = torch.log_softmax(a(input_ids=ids).logits[0, len(p) - 1:-1], -1)
        lt = torch.log_softmax(b(input_ids=ids).logits[0, len(p) - 1:-1], -1)
    one = torch.nn.functional.kl_div(lt, ls, log_target=True, reduction="sum").item()
    first = answer_divergence(a, b, tok, prompts[:1], answers[:1])
    assert d > 0 and first == pytest.approx(one / (len(ids[0]) - len(p)), rel=1e-5)
    assert answer_divergence(a, b, tok, prompts, ["", ""]) is None
