"""app/model/source.py: what a model this machine cannot fetch is answered with."""

from app.model.source import unavailable_model_hint


def test_the_offline_hint_names_the_shipped_base_for_pictures_too():
    hint = unavailable_model_hint("Qwen/Qwen2.5-VL-3B-Instruct")
    assert "--model arith-base" in hint and "shapes-vlm-base for data with pictures" in hint
    assert "prefetch --model Qwen/Qwen2.5-VL-3B-Instruct" in hint


def test_the_offline_hint_names_the_shipped_model_that_reads_the_data(tmp_path):
    """A hub model not in the cache under --local-only: on data with pictures the hint names shapes-vlm-base (a
    model that reads them), on text data arith-base; the run and the dry run say the same, exit 2, no folder."""
    from conftest import cli_here

    for dataset, first in (("shapes", "--model shapes-vlm-base (the tiny vision-language model"),
                           ("arith", "--model arith-base (the tiny model shipped")):
        for extra in ((), ("--dry-run",)):
            r = cli_here("train", "--model", "nobody/not-cached-7b", "--dataset", dataset, "--local-only",
                         "--output-dir", str(tmp_path / "runs"), *extra, cwd=tmp_path)
            said = " ".join(r.stderr.split())
            assert r.returncode == 2 and "is not in the local HF cache" in said and first in said, (extra, said)
    assert not (tmp_path / "runs").exists()
