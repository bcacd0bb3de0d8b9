"""app/ask/asking.py: what the one way to ask a model says about pictures."""

from app.config.schema import AppConfig
from app.ask.asking import NO_PICTURE, Asker


def test_a_run_trained_on_pictures_asked_without_one_is_said():
    pictures = AppConfig.model_validate({"model": {"images": True}})
    asker = Asker(None, None, processor=object(), run_cfg=pictures)
    assert asker.missing_picture(False) == NO_PICTURE and asker.missing_picture(True) is None
    assert Asker(None, None, run_cfg=AppConfig()).missing_picture(False) is None  # a text run
    assert Asker(None, None).missing_picture(False) is None  # a model asked without a run


def test_generation_settings_are_checked_in_one_place():
    """chat, compare and `qlora-app chat` ask check_generation: one line per bad setting."""
    import pytest

    from app.errors import UserError
    from app.ask.asking import check_generation

    check_generation(0.0, 1, 1)
    for args, said in (((-0.1, 8), "--temperature must be >= 0 (got -0.1); 0 means greedy"),
                       ((0.0, 0), "--max-new-tokens must be >= 1 (got 0)"),
                       ((0.0, 8, 0), "--batch-size must be >= 1 (got 0)")):
        with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
            check_generation(*args)
