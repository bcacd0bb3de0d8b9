"""app/model/source.py: what a model this machine cannot fetch is answered with."""

from app.model.source import unavailable_model_hint


def test_the_offline_hint_names_the_shipped_base_for_pictures_too():
    hint = unavailable_model_hint("Qwen/Qwen2.5-VL-3B-Instruct")
    assert "--model arith-base" in hint and "shapes-vlm-base for data with pictures" in hint
    assert "prefetch --model Qwen/Qwen2.5-VL-3B-Instruct" in hint
