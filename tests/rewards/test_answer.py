"""The shaped reward: answer extraction, numeric normalisation, ordering, containment, the TRL interface."""

import doctest
import json
import math
import pickle
import threading
import time

import pytest

import app.rewards.answer as answer_mod
import app.rewards.components as comp_mod
from app.config.build import build_config
from app.config.schema import RewardConfig
from app.errors import UserError
from app.rewards import (
    build_reward_funcs,
    extract_final_answer,
    is_correct,
    score_completion,
)
from app.run.counts import RunCounts

GSM = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72"


def total(text, ref=GSM, cfg=None):
    return score_completion(text, ref, cfg)["total"]


# ------------------------------------------------------------------------------------------------ doctests


@pytest.mark.parametrize("module", ["app.rewards", "app.rewards.answer", "app.rewards.components", "app.rewards.match",
                                    "app.rewards.json_answer"])
def test_doctests(module):
    import importlib

    res = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0


# ---------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize("text,expected", [
    ("48 + 24 = 72\nFinal answer: 72", "72"),
    ("**Final Answer:** 72", "72"),
    ("**Final Answer**: $72$.", "72"),
    ("Answer: 72 clips", "72 clips"),
    (r"so $\boxed{\frac{3}{4}}$", r"\frac{3}{4}"),
    ("I first thought 70, then 48 + 24 = 72", "72"),  # the last number, not the first
    ("The answer is 72, because 48 + 24 = 72.", "72"),
    ("72 is the answer", "72"),
    ("Work...\n#### 72", "72"),
    ("Final answer: 70\nNo wait. Final answer: 72", "72"),  # the final answer is the last one given
    ("<think>the answer is 70</think>The answer is 72.", "72"),
    ("Paris", "Paris"),
    ("", None),
    ("<think>never finished", None),
])
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


def test_think_variants():
    assert answer_mod.strip_think("a<think>x</think>b<think>y</think>c") == "abc"
    assert answer_mod.strip_think("prompt opened it</think>Final answer: 1") == "Final answer: 1"
    assert is_correct("<think>Final answer: 72</think>Final answer: 70", "72") is False
    assert is_correct("<think>Final answer: 70</think>Final answer: 72", "72") is True


# ------------------------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("pred,gold", [
    ("1,000", "1000"), ("1000", "1,000"), ("$18", "18"), ("18", "$18.00"), ("2.50", "2.5"), ("50%", "50"),
    ("-3", "−3"), ("18 dollars", "18"), ("x = 18", "18"), ("5 + 13 = 18", "18"), (r"\frac{1}{2}", "0.5"),
    ("0.75", "3/4"), (r"\dfrac{3}{4}", r"\frac{3}{4}"), ("  PARIS  ", "paris"), ("New   York", "new york"),
    (r"\$18", "18"),
    # multiple choice (ARC answerKey, MMLU index as a letter) and booleans (BoolQ)
    ("B", "B"), ("(B) Paris", "B"), ("B) Paris", "B"), ("b. Paris", "B"), ("**C**: 42", "C"), ("Option D", "D"),
    ("(A)", "A"), ("Yes, it is.", "True"), ("false", "no"), ("No.", "False"),
])
def test_answers_match(pred, gold):
    assert answer_mod.answers_match(pred, gold) is True


@pytest.mark.parametrize("pred,gold", [
    ("17", "18"), ("18 or 20", "18"), ("1,0001", "1000"), ("0.5", "5"), ("London", "Paris"), (None, "3"),
    (r"\frac{1}{3}", "0.5"), ("It is not Paris", "Paris"),
    ("(C) Rome", "B"), ("A car", "A"), ("I think B", "I"), ("B12", "B"), ("Yes", "False"), ("Not really", "yes"),
])
def test_answers_do_not_match(pred, gold):
    assert answer_mod.answers_match(pred, gold) is False


def test_reference_forms():
    assert is_correct("Final answer: 72", GSM) is True  # GSM8K: the number after ####
    assert is_correct("Final answer: 48", GSM) is False  # not the first number of the worked solution
    assert is_correct(r"\boxed{\frac{1}{2}}", r"The result is \boxed{0.5}") is True
    assert is_correct("The capital of France is Paris.", "Paris") is True
    # a one-line reference that states its answer (MetaMathQA: "The answer is: 72") is judged like a completion
    assert is_correct("Final answer: 72", "The answer is 72") is True
    assert is_correct("Final answer: 72", "The answer is: 72") is True
    assert is_correct("Final answer: 70", "The answer is 72") is False
    assert is_correct("Final answer: 72", None) is None
    assert is_correct("Final answer: 72", "   ") is None


# ------------------------------------------------------------------------------------------------ ordering

CORRECT_FMT = "In May she sold 48 / 2 = 24. Together 48 + 24 = 72.\nFinal answer: 72"
ORDERED_PAIRS = [
    # (better, worse, why)
    (CORRECT_FMT, "48 + 24 = 70.\nFinal answer: 70", "correct beats wrong, both formatted"),
    ("72", "48 + 24 = 70.\nFinal answer: 70", "correct without format beats wrong with format"),
    ("She sold 72 clips.", "Final answer: 70", "correct unformatted beats wrong formatted"),
    (CORRECT_FMT, "48 + 24 = 72", "format bonus"),
    (CORRECT_FMT, "She sold 48 + 24 = 72 clips. The answer is 72.", "'Final answer:' beats 'the answer is'"),
    ("The answer is 72.", "72", "'the answer is' beats a bare number"),
    (CORRECT_FMT, "As an AI language model, I think the answer is 72.\nFinal answer: 72", "boilerplate penalty"),
    (CORRECT_FMT, CORRECT_FMT + "\nI hope this helps! Let me know if you have any other questions.", "chat filler"),
    (CORRECT_FMT, "I'm not sure, but maybe it is 72?", "hedging"),
    (CORRECT_FMT, "Final answer: 72 or 70", "two answers is a hedge"),
    (CORRECT_FMT, ("Let me carefully think about April and May. " * 6 + "48 + 24 = 72. ") * 3 + "\nFinal answer: 72",
     "compactness: rambling"),
    (CORRECT_FMT, "Final answer: 72\n" * 25, "repeated text"),
    (CORRECT_FMT, "Final answer: 70\nWait, that is wrong: 48 + 24 = 72.\nFinal answer: 72", "self-contradiction"),
    ("Final answer: 70\nWait, that is wrong: 48 + 24 = 72.\nFinal answer: 72",
     "Final answer: 72\nWait, actually it should be 70.\nFinal answer: 70", "answer given then contradicted"),
    ("48 + 24 = 70.\nFinal answer: 70", "I'm sorry, but I cannot help with that.", "wrong attempt beats refusal"),
    ("She sold 70 clips.", "As an AI, I can't answer that.", "wrong attempt beats AI refusal"),
    ("She sold 70 clips.", "", "wrong attempt beats empty"),
    ("She sold 70 clips.", "<think>48 + 24 = 72 so", "wrong attempt beats an unfinished think"),
    ("She sold 70 clips.", "I don't know.", "attempt beats 'I don't know'"),
    ("<think>maybe 70? no: 48+24=72</think>Final answer: 72", "<think>maybe 72? no</think>Final answer: 70",
     "think is stripped before judging"),
    ("Final answer: $72.00", "Final answer: $70.00", "currency"),
    (r"48 + 24 = 72, so $\boxed{72}$.", "So the total is 48 + 24 = 72 clips", "boxed counts as format"),
    ("I first guessed 70 but 48 + 24 = 72.\nFinal answer: 72", "I first guessed 72 but 48 + 24 = 70.\nFinal answer: 70",
     "the final number decides, not the first"),
]


@pytest.mark.parametrize("better,worse,why", ORDERED_PAIRS, ids=[p[2] for p in ORDERED_PAIRS])
def test_ordering(better, worse, why):
    assert total(better) > total(worse), why


def test_reference_dominates_under_any_penalty():
    worst_correct = "As an AI language model I cannot be sure. " + "It is maybe 72. " * 60
    best_wrong = "Final answer: 70"
    assert total(worst_correct) > total(best_wrong)


def test_component_ranges():
    texts = ["", "Final answer: 72", "I cannot help", "x" * 5000, "Final answer: 1\n" * 500, CORRECT_FMT]
    for t in texts:
        c = score_completion(t, GSM)["components"]
        assert -1.0 <= c["length"] <= 0.0 and 0.0 <= c["format"] <= 1.0
        assert c["reference"] in (0.0, 1.0) and -1.0 <= c["boilerplate"] <= 0.0


# ------------------------------------------------------------------------------------- config and weights


def test_weights_override_one_key_keeps_the_others():
    cfg = build_config(sets=["reward.weights.format=1.5"]).reward
    assert cfg.weights == {"length": 0.25, "format": 1.5, "reference": 2.0, "boilerplate": 1.0}
    base = score_completion(CORRECT_FMT, GSM)
    more = score_completion(CORRECT_FMT, GSM, cfg)
    assert more["total"] == pytest.approx(base["total"] + 1.0)


def test_config_rejects_bad_values():
    with pytest.raises(UserError, match="did you mean 'format'"):
        build_config(sets=["reward.weights.formt=1"])
    with pytest.raises(UserError, match="length_limit"):
        build_config(sets=["reward.length_limit=100", "reward.length_target=400"])


def test_total_is_weighted_sum():
    cfg = RewardConfig()
    s = score_completion("As an AI, the answer is 72.", GSM, cfg)
    assert s["total"] == pytest.approx(sum(cfg.weights[k] * v for k, v in s["components"].items()))
    assert set(s["components"]) == {"length", "format", "reference", "boilerplate"}


def test_no_reference_scores_reference_as_zero():
    s = score_completion("Final answer: 72", None)
    assert s["components"]["reference"] == 0.0
    assert s["total"] == pytest.approx(0.5 * 1.0 + 0.25 * s["components"]["length"])


# ---------------------------------------------------------------------------------------- TRL interface


def test_build_reward_funcs_names_weights_and_chat_form():
    funcs, weights = build_reward_funcs(RewardConfig(), has_reference=True)
    assert [f.__name__ for f in funcs] == ["length", "format", "reference", "boilerplate"]
    assert weights == [0.25, 0.5, 2.0, 1.0]
    chat = [[{"role": "assistant", "content": "Final answer: 72"}], [{"role": "assistant", "content": "70"}]]
    ref = next(f for f in funcs if f.__name__ == "reference")
    assert ref(chat, reference=[GSM, GSM], prompts=["p", "p"], trainer_state=None) == [1.0, 0.0]
    assert ref(["Final answer: 72"], reference=[None]) == [None]  # row without a reference is skipped by TRL
    # TRL 1.16 names the column this way
    from trl.trainer.utils import get_callable_name

    assert [get_callable_name(f) for f in funcs] == ["length", "format", "reference", "boilerplate"]


def test_no_reference_drops_reference_and_accuracy():
    funcs, weights = build_reward_funcs(RewardConfig(accuracy=True), has_reference=False)
    assert [f.__name__ for f in funcs] == ["length", "format", "boilerplate"]
    assert len(weights) == 3


def test_accuracy_selectable():
    funcs, weights = build_reward_funcs(RewardConfig(accuracy=True), has_reference=True)
    assert funcs[-1].__name__ == "accuracy" and weights[-1] == 1.0
    funcs, weights = build_reward_funcs(RewardConfig(weights={"accuracy": 3.0}), has_reference=True)
    assert funcs[-1].__name__ == "accuracy" and weights[-1] == 3.0


def test_accuracy_is_strict_math_verify():
    acc = comp_mod.AccuracyReward()
    out = acc([r"<think>\boxed{3}</think> so \boxed{\frac{1}{2}}", r"\boxed{0.3}", "Final answer: 0.5", "x"],
              reference=[r"\frac{1}{2}", "#### 0.5", "0.5", "no math here at all"])
    assert out[:2] == [1.0, 0.0]
    assert out[2] in (0.0, 1.0)  # plain "Final answer:" has no LaTeX anchor: strict by design
    assert out[3] is None or out[3] == 0.0  # unparseable gold -> None (skipped)
    assert acc(["\\boxed{1}"], reference=["   "]) == [None]


def test_reward_funcs_pickle():
    funcs, _ = build_reward_funcs(RewardConfig(accuracy=True), has_reference=True)
    back = pickle.loads(pickle.dumps(funcs))
    assert [f.__name__ for f in back] == [f.__name__ for f in funcs]
    assert back[2](["Final answer: 72"], reference=[GSM]) == [1.0]


# -------------------------------------------------------------------------------------------- containment


def test_component_exception_gives_none_and_counts(monkeypatch, caplog):
    real = answer_mod.extract_final_answer

    def flaky(text):
        if "boom" in str(text):
            raise RuntimeError("boom")
        return real(text)

    monkeypatch.setattr(answer_mod, "extract_final_answer", flaky)
    counts = RunCounts()  # the run's own counts: nothing global to reset between tests
    errors = counts.reward_errors
    funcs, weights = build_reward_funcs(RewardConfig(), has_reference=True, counts=counts)
    ref = next(f for f in funcs if f.__name__ == "reference")
    with caplog.at_level("WARNING"):
        out = ref(["Final answer: 72", "boom", "Final answer: 70"], reference=[GSM] * 3)
    assert out == [1.0, None, 0.0]
    assert errors() == 1 and all(f.errors is errors for f in funcs)
    assert pickle.loads(pickle.dumps(ref)).errors() == 1  # TRL may copy its reward functions
    assert "reference" in caplog.text and "RuntimeError" in caplog.text
    assert errors.first == {"reference": "RuntimeError: boom"}  # why, kept for the summary
    # a run's reward functions are made for it: another run's (or a one-off score's) count apart
    other = build_reward_funcs(RewardConfig(), has_reference=True, counts=RunCounts())[0]
    assert all(f is not g and g.errors is not errors for f, g in zip(funcs, other))
    # score_completion counts the failed component as 0 instead of raising
    s = score_completion("boom Final answer: 72", GSM)
    assert s["components"]["reference"] == 0.0 and math.isfinite(s["total"])


def test_none_rewards_survive_trl_style_aggregation(monkeypatch):
    """What GRPOTrainer does with our outputs: None -> NaN, weighted nansum, group advantages stay finite."""
    import torch

    monkeypatch.setattr(comp_mod.LengthReward, "score", lambda self, t, r: 1 / 0 if "x" in t else (0.0, ""))
    funcs, weights = build_reward_funcs(RewardConfig(), has_reference=True)
    completions = ["Final answer: 72", "x. Final answer: 72", "Final answer: 70", "xx"]
    cols = []
    for f in funcs:
        out = f(completions, reference=[GSM] * 4)
        assert len(out) == 4
        cols.append([torch.nan if v is None else v for v in out])
    per_func = torch.tensor(cols).T
    rewards = (per_func * torch.tensor(weights)).nansum(dim=1)
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    assert torch.isfinite(adv).all()
    assert rewards[1] > rewards[2]  # the failed length component counts 0, the correct answer still wins


def test_timeout_exception_is_contained(monkeypatch):
    from math_verify.errors import TimeoutException

    def slow(self, t, r):
        raise TimeoutException("too slow")

    monkeypatch.setattr(comp_mod.FormatReward, "score", slow)
    assert comp_mod.FormatReward()(["Final answer: 1"]) == [None]


def test_adversarial_inputs_are_bounded():
    # Robustness, not a benchmark: each must finish in well under math-verify's own bounds.
    inputs = ["1" * 300_000, "answer" + " " * 100_000, "\\boxed{" * 50_000, "<think>" * 50_000,
              ("x" * 39 + " is the ") * 10_000, "Final answer: " + "\\frac{" * 200 + "1" + "}" * 200,
              "1," * 200_000, "Final answer: 3\n" * 50_000]
    for text in inputs:
        t0 = time.time()
        s = score_completion(text, r"\frac{x^2+1}{3}")
        assert math.isfinite(s["total"])
        assert time.time() - t0 < 10, text[:40]


def test_scoring_from_a_worker_thread():
    # math-verify's signal-based timeout only works on the main thread; the UI scores from worker threads.
    out = {}

    def work():
        out["s"] = score_completion(r"Final answer: \frac{1}{2}", "0.5")

    th = threading.Thread(target=work)
    th.start()
    th.join(30)
    assert out["s"]["components"]["reference"] == 1.0


# ----------------------------------------------------------------------------------------- custom rewards


def test_custom_reward_from_file_and_module(tmp_path, monkeypatch):
    f = tmp_path / "myreward.py"
    f.write_text("def shout(completions, **kw):\n    return [1.0 if '!' in str(c) else 0.0 for c in completions]\n"
                 "def broken(completions, **kw):\n    return [1 / (len(str(c)) - 3) for c in completions]\n")
    entry = f"{f}:shout"
    cfg = RewardConfig(custom=[entry], weights={entry: 0.5})
    funcs, weights = build_reward_funcs(cfg, has_reference=True)
    assert funcs[-1].__name__ == "shout" and weights[-1] == 0.5
    assert funcs[-1](["hi!", "hi"]) == [1.0, 0.0]
    assert pickle.loads(pickle.dumps(funcs[-1]))(["yes!"]) == [1.0]
    s = score_completion("Final answer: 72!", GSM, cfg)
    assert s["components"]["shout"] == 1.0

    monkeypatch.syspath_prepend(str(tmp_path))
    counts = RunCounts()
    errors = counts.reward_errors
    broken = build_reward_funcs(RewardConfig(custom=["myreward:broken"]), has_reference=False, counts=counts)[0][-1]
    assert broken(["abc", "abcd"]) == [None, 1.0]  # only the sample that raised loses its reward
    assert errors() == 1


@pytest.mark.parametrize("entry,msg", [
    ("no_such_module_xyz:fn", "cannot be imported"),
    ("json:no_such_function", "has no function"),
    ("/nonexistent/file.py:fn", "not found"),
    ("json:__doc__", "not callable"),
])
def test_custom_reward_errors_are_user_errors(entry, msg):
    with pytest.raises(UserError, match=msg):
        build_reward_funcs(RewardConfig(custom=[entry]), has_reference=True)


def test_custom_reward_bad_form_rejected_by_config():
    with pytest.raises(UserError, match="module:function"):
        build_config(sets=["reward.custom=[justaname]"])


# ------------------------------------------------------------------------------------------- score command


def test_run_score_json_file(tmp_path, capsys):
    from app.cli.score import run_score

    p = tmp_path / "rows.jsonl"
    rows = [{"completion": "Final answer: 72", "reference": GSM}, {"completion": "I cannot help", "reference": None},
            {"completion": [{"role": "assistant", "content": "70"}], "reference": 72}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert run_score(None, None, str(p), True, []) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert len(lines) == 3
    for line, row in zip(lines, rows):
        expected = score_completion(row["completion"], None if row["reference"] is None else str(row["reference"]))
        assert line["total"] == pytest.approx(expected["total"])
        assert set(line["components"]) == {"length", "format", "reference", "boilerplate"}
    assert lines[0]["total"] > lines[2]["total"] > lines[1]["total"]


def test_run_score_table_explains(capsys):
    from app.cli.score import run_score

    assert run_score("As an AI, final answer: 72", "#### 72", None, False, ["reward.weights.boilerplate=2"]) == 0
    out = capsys.readouterr().out
    for word in ("length", "format", "reference", "boilerplate", "as an ai", "matches"):
        assert word in out


@pytest.mark.parametrize("content,msg", [
    ('{"completion": "a"}\nnot json\n', "line 2: not valid JSON"),
    ('{"reference": "a"}\n', "line 1: needs a \"completion\" key"),
    ('{"completion": 5}\n', "line 1: \"completion\" must be"),
    ("\n\n", "has no rows"),
])
def test_run_score_bad_file(tmp_path, content, msg):
    from app.cli.score import run_score

    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(UserError, match=msg):
        run_score(None, None, str(p), True, [])


def test_run_score_bad_arguments(tmp_path):
    from app.cli.score import run_score

    with pytest.raises(UserError, match="nothing to score"):
        run_score(None, None, None, True, [])
    with pytest.raises(UserError, match="not found"):
        run_score(None, None, str(tmp_path / "missing.jsonl"), True, [])
    with pytest.raises(UserError, match="either"):
        run_score("a", None, str(tmp_path / "x.jsonl"), True, [])
