"""Dotted keys: one walk to read one (a config, a section or their dict form) and one to write one."""

import pytest

from app.config.fields import get_key, set_key
from app.config.keys import parse_set, value_rows
from app.config.schema import AppConfig


def test_get_key_reads_configs_sections_and_dicts_alike():
    cfg = AppConfig.model_validate({"grpo": {"beta": 0.25}, "reward": {"judge": {"url": "http://127.0.0.1:1/v1"}}})
    assert get_key(cfg, "grpo.beta") == 0.25 == get_key(cfg.model_dump(), "grpo.beta")
    assert get_key(cfg.reward, "judge.url") == "http://127.0.0.1:1/v1"
    assert get_key(cfg, "grpo.nope", None) is None and get_key({"a": 1}, "a.b", "x") == "x"
    with pytest.raises(KeyError):
        get_key(cfg, "grpo.nope")


def test_set_key_makes_the_sections_on_the_way():
    assert set_key({}, "lora.r", 8) == {"lora": {"r": 8}}
    data = {"lora": {"r": 4, "alpha": 8}}
    set_key(data, "lora.r", 16)
    assert data == {"lora": {"r": 16, "alpha": 8}}


def test_the_key_readers_and_writers_agree():
    assert parse_set(["lora.r=8", "grpo.beta=0.1"]) == {"lora": {"r": 8}, "grpo": {"beta": 0.1}}
    rows = dict((k, v) for k, v, _ in value_rows(AppConfig.model_validate({"lora": {"r": 12}})))
    assert rows["lora.r"] == "12"
