"""app/export/mtp.py: a Qwen3.5 base with a multi-token-prediction layer in its checkpoint (tests/tiny.add_mtp, as Qwen
publishes it): its GGUF export carries the base's layer unchanged (the converter writes Qwen3.5's), a base GGUF too;
a config that counts one whose files hold none, and an architecture whose converter class writes none, are said;
the MTP tensors are told from the rest by name and layer number."""

import json

import pytest


def _gguf(path):
    """{tensor name: array} and {field name: value} of a GGUF file."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    fields = {k: f.parts[-1].tolist() for k, f in reader.fields.items() if k.startswith("qwen35.")}
    return {t.name: t.data for t in reader.tensors}, fields


@pytest.mark.slow
def test_a_gguf_export_carries_the_bases_multi_token_prediction_layer(tmp_path):
    pytest.importorskip("conversion")
    import numpy as np
    import tiny
    from fakes import make_adapter, write_run

    from app.export.base_gguf import export_base
    from app.export.bundle import export_run

    base = tiny.build_family("qwen3_5", tmp_path / "base")
    mtp = tiny.add_mtp(base)
    run = write_run(tmp_path / "run", base, make_adapter(base, tmp_path / "a"))
    res = export_run(run, tmp_path / "gguf", fmt="gguf", outtype="f32", measure_rows=0)
    line = next(n for n in res.notes if "multi-token-prediction" in n)
    assert f"1 multi-token-prediction layer(s) ({len(mtp)} tensors, unchanged" in line and "are in this GGUF" in line
    tensors, fields = _gguf(tmp_path / "gguf" / res.files["gguf"])
    assert fields["qwen35.block_count"] == [3] and fields["qwen35.nextn_predict_layers"] == [1]
    assert np.array_equal(tensors["blk.2.nextn.eh_proj.weight"], mtp["mtp.fc.weight"].numpy())
    assert {"blk.2.nextn.enorm.weight", "blk.2.nextn.hnorm.weight", "blk.2.nextn.shared_head_norm.weight",
            "blk.2.attn_q.weight", "blk.2.ffn_down.weight"} <= set(tensors)
    assert np.array_equal(tensors["blk.2.ffn_down.weight"], mtp["mtp.layers.0.mlp.down_proj.weight"].numpy())

    alone = export_base(str(base), tmp_path / "base-gguf", outtype="f32", local_only=True)  # gguf-lora's base file
    tensors, fields = _gguf(tmp_path / "base-gguf" / alone.files["gguf"])
    assert fields["qwen35.nextn_predict_layers"] == [1]
    assert np.array_equal(tensors["blk.2.nextn.eh_proj.weight"], mtp["mtp.fc.weight"].numpy())


@pytest.mark.slow
def test_a_config_counting_layers_its_files_lack_is_said(tmp_path):
    """A Qwen3.5 base whose config counts a multi-token-prediction layer its files do not hold: the GGUF has none
    (the converter is told so) and the export says so."""
    pytest.importorskip("conversion")
    import tiny
    from fakes import make_adapter, write_run

    from app.export.bundle import export_run

    base = tiny.build_family("qwen3_5", tmp_path / "base")
    cfg = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**cfg, "mtp_num_hidden_layers": 1}))
    run = write_run(tmp_path / "run", base, make_adapter(base, tmp_path / "a"))
    res = export_run(run, tmp_path / "gguf", fmt="gguf", outtype="f32", measure_rows=0)
    assert any("config counts 1 multi-token-prediction layer(s) but its files hold none" in n for n in res.notes)
    tensors, fields = _gguf(tmp_path / "gguf" / res.files["gguf"])
    assert fields["qwen35.block_count"] == [2] and not any("nextn" in t for t in tensors)


def test_the_mtp_tensors_are_told_by_name_and_layer(tmp_path, monkeypatch):
    import conversion
    import torch
    from safetensors.torch import save_file

    from app.export.mtp import MTP_FILE, carry, keep_mtp, mtp_layers, mtp_tensors

    glm = {"num_hidden_layers": 2, "num_nextn_predict_layers": 1}
    t = torch.zeros(2, 2)
    save_file({"model.layers.1.mlp.up_proj.weight": t, "model.layers.2.eh_proj.weight": t + 1,
               "model.layers.2.mlp.experts.0.up_proj.weight": t + 2, "model.visual.blocks.40.attn.weight": t + 4},
              str(tmp_path / "model-00001.safetensors"))
    save_file({"model.language_model.layers.3.enorm.weight": t + 3, "lm_head.weight": t + 5},
              str(tmp_path / "model-00002.safetensors"))
    assert mtp_layers(glm) == 1 and mtp_layers({"text_config": {"mtp_num_hidden_layers": 2}}) == 2
    assert mtp_layers({"num_hidden_layers": 2}) == 0 and mtp_tensors(tmp_path, {"num_hidden_layers": 2}) == {}
    assert mtp_tensors(tmp_path, glm) == {"model.layers.2.eh_proj.weight": "model-00001.safetensors",
                                          "model.layers.2.mlp.experts.0.up_proj.weight": "model-00001.safetensors",
                                          "model.language_model.layers.3.enorm.weight": "model-00002.safetensors"}
    merged = tmp_path / "merged"
    merged.mkdir()
    assert carry(tmp_path, merged, glm, torch.bfloat16) == 3
    from safetensors.torch import load_file

    copied = load_file(str(merged / MTP_FILE))
    assert copied["model.layers.2.eh_proj.weight"].dtype == torch.bfloat16 and float(
        copied["model.language_model.layers.3.enorm.weight"][0, 0]) == 3.0

    class NoMtp:  # a converter class that writes none (DeepSeek V3's drops them)
        pass

    monkeypatch.setattr(conversion, "get_model_class", lambda arch: NoMtp)
    line = keep_mtp(tmp_path, tmp_path / "other", glm, torch.float32, "X")
    assert "not in this GGUF: llama.cpp's converter writes none for NoMtp" in line
    assert not (tmp_path / "other").exists() and keep_mtp(tmp_path, merged, {}, torch.float32, "X") is None
