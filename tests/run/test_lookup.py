"""app/run/lookup.py: finding runs and adapters, and reading an adapter's config."""


def test_one_reader_of_an_adapters_config(tmp_path):
    """adapter_config.json is read in one place (the base, the rank, the type): broken JSON or no peft_type is one
    line saying it is no PEFT adapter."""
    import json

    import pytest

    from app.errors import UserError
    from app.run.lookup import adapter_config

    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    assert adapter_config(tmp_path)["r"] == 8
    (tmp_path / "adapter_config.json").write_text("{not json")
    with pytest.raises(UserError, match="is not valid JSON; pass an adapter saved by PEFT"):
        adapter_config(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8}))
    with pytest.raises(UserError, match="without peft_type; it is not a PEFT adapter"):
        adapter_config(tmp_path)
