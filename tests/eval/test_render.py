"""app/eval/render.py: how a comparison's numbers read."""

from app.eval.render import reward_text


def test_a_reward_that_rounds_to_zero_reads_0_000():
    assert reward_text(-0.0001) == "0.000" and reward_text(-0.0004999) == "0.000" and reward_text(0.0) == "0.000"
    assert reward_text(-0.0006) == "-0.001" and reward_text(0.8125) == "0.812" and reward_text(-1) == "-1.000"


def test_rows_a_picture_run_answered_without_pictures_are_said():
    from types import SimpleNamespace

    from app.eval.render import pictureless

    assert "2 row(s) had no picture, and this run was trained on pictures" in pictureless(
        SimpleNamespace(config={"pictureless": 2}))
    assert pictureless(SimpleNamespace(config={"pictureless": None})) is None
    assert pictureless(SimpleNamespace(config={})) is None
