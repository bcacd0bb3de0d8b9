"""app/export/quantize.py: a GGUF at the size the card runs. The types asked (Q4_K_M by default, several from one
merge), quantized by a real llama.cpp in process from the converter's f16 file; tensors whose rows cannot take a
k-quant fall back as llama.cpp decides and the export says how many; the quantized file loads in llama.cpp and
reads like the f16 one; a quantization that fails is one line with the f16 file kept."""

import sys

import pytest

from app.errors import UserError
from app.export import quantize as quant


def test_outtypes_are_parsed_checked_and_ordered():
    assert quant.parse_outtypes("Q4_K_M") == ["q4_k_m"]
    assert quant.parse_outtypes("q4_k_m, q8_0,q4_k_m") == ["q4_k_m", "q8_0"]  # the first: the Modelfile's
    for bad in ("q4", "q4_k_m,int3", ""):
        with pytest.raises(UserError, match=r"is not one of q4_k_m, .*q8_0, f16, bf16, f32.* \(q4_k_m is the default"):
            quant.parse_outtypes(bad)
    assert quant.DEFAULT == "q4_k_m" and set(quant.CONVERTER_TYPES) <= set(quant.OUTTYPES)
    assert not quant.needs_quantizer(["f16", "q8_0"]) and quant.needs_quantizer(["f16", "q5_k_m"])


def test_a_missing_quantizer_is_one_line_before_anything_loads(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    quant.check_quantizer(["f16", "q8_0"])  # the converter writes these itself
    needs = r"--outtype q4_k_m needs llama.cpp's quantizer.*pip install 'qlora-app\[gguf\]'"
    with pytest.raises(UserError, match=needs):
        quant.check_quantizer(["f16", "q4_k_m"])


@pytest.fixture(scope="module")
def wide_adapter(tmp_path_factory):
    """A tiny Qwen2 whose rows are 256 values wide (every weight matrix can take a k-quant), with a random adapter."""
    import tiny
    from fakes import make_adapter

    root = tmp_path_factory.mktemp("wide")
    tiny.build_tokenizer(root / "tok")
    base = tiny.build_from_config("qwen2", root / "base", root / "tok", hidden_size=256, intermediate_size=512,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=512, tie_word_embeddings=False)
    return make_adapter(base, root / "adapter")


def test_q4_k_m_by_default_with_real_k_quants_that_read_like_the_f16_file(wide_adapter, tmp_path):
    pytest.importorskip("llama_cpp")
    import numpy as np
    from llamacpp import scores

    from app.export.bundle import export_run

    res = export_run(wide_adapter, tmp_path / "ollama", fmt="ollama")  # the default type
    q4 = res.out / res.files["gguf"]
    assert q4.name.endswith("-q4_k_m.gguf") and (res.out / "Modelfile").read_text().startswith(f"FROM ./{q4.name}\n")
    assert not list(res.out.glob("*-f16.gguf"))  # the quantizer's input is not left behind
    types = quant.tensor_types(q4)
    assert set(types) <= {"Q4_K", "Q6_K"} and types["Q4_K"] > types["Q6_K"] > 0, types  # llama.cpp's Q4_K_M mix
    assert any(q4.name in n and "fell back" not in n for n in res.notes), res.notes
    both = export_run(wide_adapter, tmp_path / "gguf", fmt="gguf", outtype="f16,q4_k_m,q8_0")  # one merge, three
    files = {t: both.out / both.files["gguf" if t == "f16" else f"gguf-{t}"] for t in ("f16", "q4_k_m", "q8_0")}
    sizes = {t: f.stat().st_size for t, f in files.items()}
    assert sizes["q4_k_m"] < 0.5 * sizes["f16"] and sizes["q4_k_m"] < sizes["q8_0"] < 0.6 * sizes["f16"], sizes
    ids = list(range(5, 60))
    ref = scores(files["f16"], ids)
    for t, least in (("q8_0", 0.995), ("q4_k_m", 0.95)):  # measured: 0.9997 and 0.978
        got = scores(files[t], ids)
        cos = float(np.mean([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(got, ref)]))
        assert cos > least, (t, cos)


def test_rows_too_narrow_for_a_k_quant_fall_back_and_the_export_says_how_many(tiny_models, tmp_path):
    pytest.importorskip("llama_cpp")
    from fakes import make_adapter

    from app.export.bundle import export_run

    adapter = make_adapter(tiny_models["qwen2"], tmp_path / "adapter")  # hidden 64: no row takes a k-quant
    res = export_run(adapter, tmp_path / "gguf", fmt="gguf")
    types = quant.tensor_types(res.out / res.files["gguf"])
    assert not {"Q4_K", "Q6_K"} & set(types), types
    said = next(n for n in res.notes if res.files["gguf"] in n)
    assert "fell back from q4_k_m" in said and int(said.split("; ")[1].split()[0]) > 0, said


def test_a_quantization_that_fails_is_one_line_and_keeps_the_f16_file(tiny_models, tmp_path, monkeypatch):
    llama_cpp = pytest.importorskip("llama_cpp")
    from fakes import make_adapter

    from app.export.bundle import export_run

    adapter = make_adapter(tiny_models["qwen2"], tmp_path / "adapter")
    monkeypatch.setattr(llama_cpp, "llama_model_quantize", lambda src, dst, params: 1)
    with pytest.raises(UserError, match=r"could not quantize the GGUF to q4_k_m .*the f16 file is kept"):
        export_run(adapter, tmp_path / "ollama", fmt="ollama")
    out = tmp_path / "ollama"
    kept = [p.name for p in out.glob("*.gguf")]
    assert len(kept) == 1 and kept[0].endswith("-f16.gguf"), kept
    assert (out / "Modelfile").read_text().startswith(f"FROM ./{kept[0]}\n")
