"""app/eval/asking.py: what the one way to ask a model says about pictures."""

from app.config.schema import AppConfig
from app.eval.asking import NO_PICTURE, Asker


def test_a_run_trained_on_pictures_asked_without_one_is_said():
    pictures = AppConfig.model_validate({"model": {"images": True}})
    asker = Asker(None, None, processor=object(), run_cfg=pictures)
    assert asker.missing_picture(False) == NO_PICTURE and asker.missing_picture(True) is None
    assert Asker(None, None, run_cfg=AppConfig()).missing_picture(False) is None  # a text run
    assert Asker(None, None).missing_picture(False) is None  # a model asked without a run
