"""app/synth/pairs.py: pairs are sampled from the prompt's text alone, so data with pictures, a model trained on them
and a run that answers with tools are each one line, exit 2, no folder (they were sampled on text without a word)."""

from conftest import cli_here

from app.demo.recipe import base_model_path


def test_pictures_and_tools_are_refused_before_the_folder_is_made(tmp_path):
    from fakes import make_adapter

    from app.config.schema import AppConfig

    out = tmp_path / "pairs"
    r = cli_here("pairs", "--dataset", "shapes", "--model", str(base_model_path()), "--out", str(out),
                 "--local-only", cwd=tmp_path)
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "this data has pictures (column 'image')" in said and not out.exists(), said
    run = tmp_path / "tools-run"  # a run that answers with the calculator
    run.mkdir()
    cfg = AppConfig.model_validate({"method": "grpo", "model": {"name_or_path": str(base_model_path())},
                                    "data": {"dataset": "arith"}, "tools": {"use": ["calculator"]}})
    (run / "config.yaml").write_text(cfg.to_yaml())
    make_adapter(base_model_path(), run / "adapter")
    r = cli_here("pairs", "--adapter", str(run), "--dataset", "arith", "--out", str(out), "--local-only",
                 cwd=tmp_path)
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "this run answers with tools" in said and not out.exists(), said
