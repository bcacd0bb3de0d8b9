"""app/eval/uncertainty.py: the lift's interval and McNemar's test, and what they let a proof say."""

import random

import pytest

from app.eval.uncertainty import LEVEL, accuracy_lift, reward_lift
from app.run.summary import lift_words


def _pairs(gained: int, lost: int, both: int, neither: int) -> list[tuple[bool, bool]]:
    return [(False, True)] * gained + [(True, False)] * lost + [(True, True)] * both + [(False, False)] * neither


def test_a_clear_gain_is_shown_and_noise_is_not():
    clear = accuracy_lift(_pairs(30, 2, 40, 28))
    assert clear.shown and clear.low > 0 and abs(clear.diff - 0.28) < 1e-9 and clear.p < 1e-5
    noise = accuracy_lift(_pairs(5, 3, 50, 42))
    assert not noise.shown and noise.low < 0 < noise.high and noise.p > 0.5
    assert noise.rows_to_show > 100  # 8 discordant rows in 100 for +2 points: about 770 rows would show it
    said = lift_words(noise.to_dict(), "accuracy", pct=True)
    assert said.startswith("accuracy: no difference shown on 100 rows (+2.0 pts") and "gain" not in said, said
    assert "a gain shown on 100 rows" in lift_words(clear.to_dict(), "accuracy", pct=True)
    assert "a loss shown" in lift_words(accuracy_lift(_pairs(2, 30, 40, 28)).to_dict(), "accuracy", pct=True)


def test_mcnemar_is_the_exact_binomial_of_the_rows_that_changed():
    lift = accuracy_lift(_pairs(10, 2, 0, 88))  # 12 discordant rows, 2 against: 2 * P(X <= 2 | 12, 1/2)
    assert abs(lift.p - 2 * (1 + 12 + 66) / 4096) < 1e-9
    assert accuracy_lift(_pairs(0, 0, 50, 50)).p == 1.0 and accuracy_lift([]) is None


def test_the_interval_is_the_same_for_the_same_rows_and_rewards_get_one_too():
    rows = [(random.Random(i).random(), random.Random(i).random() + 0.1) for i in range(50)]
    a, b = reward_lift(rows), reward_lift(rows)
    assert (a.low, a.high) == (b.low, b.high) and a.p is None
    assert abs(a.diff - 0.1) < 1e-9 and a.low == a.high == a.diff  # every row moved alike: no spread, no doubt
    spread = reward_lift([(0.0, x) for x in (0.3, -0.1, 0.2, 0.0, 0.25, -0.05) * 5])
    assert spread.low < spread.diff < spread.high


def test_with_no_real_difference_the_interval_leaves_zero_out_about_one_time_in_twenty():
    """The interval is a classifier of "a difference": on adapters no better than the base (each row's answers
    equally likely to gain or lose), it calls a difference at about its 5% error rate, not more."""
    alarms = 0
    trials = 200
    for seed in range(trials):
        rng = random.Random(seed)
        rows = []
        for _ in range(100):
            if rng.random() < 0.2:  # a fifth of the rows change, as likely right-to-wrong as wrong-to-right
                rows.append(rng.choice([(True, False), (False, True)]))
            else:
                same = rng.random() < 0.4
                rows.append((same, same))
        alarms += accuracy_lift(rows).shown
    assert LEVEL == 0.95 and 2 <= alarms <= 20, alarms  # 10 expected; a percentile interval runs a little narrow


def _comparison(gained: int, lost: int, same: int):
    from app.eval.result import Cell, Comparison, Row

    def cell(right: bool) -> Cell:
        return Cell(text="x", tokens=1, reward=1.0 if right else 0.0, components={}, correct=right)

    rows = [Row(prompt=f"p{i}", reference="1", source="heldout", base=cell(b), adapter=cell(a))
            for i, (b, a) in enumerate(_pairs(gained, lost, same // 2, same - same // 2))]
    return Comparison.of(rows, {"dataset": "arith"})


def test_every_view_of_a_proof_says_how_sure_its_lift_is():
    """compare.json keeps the intervals; the terminal, the page, the UI, `runs` and the card say them, and a lift
    within noise is said as no difference shown, never as a gain."""
    import io

    from rich.console import Console

    from app.eval.render import page_html, print_result, summary_markdown
    from app.eval.result import Comparison
    from app.export.card import proof_table
    from app.run.summary import comparison_text

    for c, words in ((_comparison(30, 2, 68), "a gain shown on 100 rows"),
                     (_comparison(4, 2, 94), "accuracy: no difference shown on 100 rows")):
        d = c.to_dict()
        again = Comparison.from_dict(d)
        assert again.summary.lift == d["summary"]["lift"] and d["summary"]["lift"]["accuracy"]["p"] is not None
        out = io.StringIO()
        print_result(c, Console(file=out, width=250))
        assert words in " ".join(out.getvalue().split())
        assert words in page_html(c) and words in summary_markdown(c)
        assert words in " ".join(proof_table(d))
        said = comparison_text(d)
        assert ("no difference shown" in said) == ("no difference" in words), said


def test_a_held_out_points_share_gets_wilsons_interval():
    from app.eval.uncertainty import share_interval

    low, high = share_interval(16, 32)  # Wilson at p = 0.5, n = 32: 0.5 -/+ 0.164 (hand-computed)
    assert low == pytest.approx(0.336, abs=1e-3) and high == pytest.approx(0.664, abs=1e-3)
    low, high = share_interval(0, 32)  # all wrong still leaves room above 0: z^2 / (n + z^2)
    assert low == pytest.approx(0.0, abs=1e-9) and high == pytest.approx(3.8415 / 35.8415, abs=1e-3)
    wide, narrow = share_interval(5, 10), share_interval(50, 100)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]  # more rows, a narrower interval
    assert share_interval(0, 0) is None
