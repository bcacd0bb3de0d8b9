"""app/export/gguf.py's decisions for vision-language models: which architectures get a projector file, the tensor
names the converter reads, the projector's type, and a Gemma 3 llama.cpp would compute differently."""

import json

import pytest

from app.errors import UserError

pytest.importorskip("conversion")


def _gemma3(**text):
    from transformers import Gemma3Config

    shape = dict(hidden_size=64, num_attention_heads=4, head_dim=16, num_hidden_layers=1, intermediate_size=64,
                 vocab_size=64)
    return Gemma3Config(text_config={**shape, **text}, vision_config=dict(hidden_size=32, num_hidden_layers=1,
                                                                          intermediate_size=64, num_attention_heads=4),
                        architectures=["Gemma3ForConditionalGeneration"])


def test_a_vision_model_needs_the_converters_projector_class():
    from types import SimpleNamespace

    from app.export.gguf import check_architecture

    gemma = _gemma3(query_pre_attn_scalar=16)
    assert check_architecture(gemma, images=True) == "Gemma3ForConditionalGeneration"
    # a language model the converter knows, with no vision projector class: refused when it must read pictures
    text_only = SimpleNamespace(architectures=["Qwen3ForCausalLM"])
    assert check_architecture(text_only) == "Qwen3ForCausalLM"
    with pytest.raises(UserError, match=r"no vision projector \(--mmproj\) for Qwen3ForCausalLM.*--format merged"):
        check_architecture(text_only, images=True)


@pytest.mark.parametrize("arch,converts", [
    ("Gemma3ForConditionalGeneration", True), ("Gemma4ForConditionalGeneration", True),
    ("Qwen2_5_VLForConditionalGeneration", True), ("Qwen3VLForConditionalGeneration", True),
    ("Qwen3_5ForConditionalGeneration", True), ("LlavaForConditionalGeneration", True),
    ("SmolVLMForConditionalGeneration", False), ("Mistral3ForConditionalGeneration", False)])
def test_which_vision_families_llama_cpp_converts(arch, converts):
    """The families docs/export.md lists, as the installed converter has them: one line for the others."""
    from types import SimpleNamespace

    from app.export.gguf import check_architecture

    config = SimpleNamespace(architectures=[arch])
    if converts:
        assert check_architecture(config, images=True) == arch
    else:
        with pytest.raises(UserError, match=f"{arch}.*export --format merged"):
            check_architecture(config, images=True)


def test_a_gemma3_whose_attention_scale_llama_cpp_ignores_is_refused():
    from app.export.gguf import check_architecture

    # transformers' default query_pre_attn_scalar (256) beside head_dim 16: llama.cpp would scale by 1/4, not 1/16
    with pytest.raises(UserError, match="query_pre_attn_scalar=256 .*head_dim 16.*answer differently"):
        check_architecture(_gemma3(query_pre_attn_scalar=256), images=True)
    # the 27B's rule (hidden / heads) is llama.cpp's too
    assert check_architecture(_gemma3(hidden_size=96, head_dim=16, query_pre_attn_scalar=24), images=True)


def test_siglip_tensors_are_read_under_the_hubs_names():
    from app.export.gguf import _SIGLIP_LEVEL

    def hub(name):
        return _SIGLIP_LEVEL.sub(r"\1vision_model.", name)

    assert hub("vision_tower.embeddings.patch_embedding.bias") == \
        "vision_tower.vision_model.embeddings.patch_embedding.bias"
    assert hub("model.vision_tower.encoder.layers.0.mlp.fc1.weight") == \
        "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"
    assert hub("vision_tower.head.probe") == "vision_tower.vision_model.head.probe"  # the converter then skips it
    # already the hub's names, the projector and the language model: unchanged
    for name in ("vision_tower.vision_model.post_layernorm.weight", "multi_modal_projector.mm_soft_emb_norm.weight",
                 "language_model.model.layers.0.mlp.up_proj.weight", "model.visual.blocks.0.attn.qkv.weight"):
        assert hub(name) == name


def test_projector_type_follows_the_model_but_is_never_quantized():
    from app.export.gguf import projector_outtype
    from app.export.quantize import OUTTYPES

    assert {t: projector_outtype(t) for t in OUTTYPES} == {t: t if t in ("f16", "bf16", "f32") else "f16"
                                                           for t in OUTTYPES}
    assert projector_outtype("q4_k_m") == "f16" and projector_outtype("bf16") == "bf16"


def test_modelfile_names_the_projector_in_a_second_from(tiny_models, tmp_path):
    from transformers import AutoTokenizer

    from app.export.bundle import modelfile

    tok = AutoTokenizer.from_pretrained(tiny_models["qwen2"])
    text, notes = modelfile(tok, "m-f16.gguf", None, tmp_path, projector="mmproj-m-f16.gguf")
    assert text.startswith("FROM ./m-f16.gguf\nFROM ./mmproj-m-f16.gguf\n\n")
    assert any("second FROM" in n and "llama-server --mmproj" in n for n in notes)
    plain, plain_notes = modelfile(tok, "m-f16.gguf", None, tmp_path)
    assert plain.startswith("FROM ./m-f16.gguf\n\n") and "mmproj" not in plain + " ".join(plain_notes)


def test_a_merged_gemma4_config_gets_the_hubs_keys_back():
    """transformers 5.23 saves Gemma 4's full-attention head size as a per-layer override; the converter reads
    ``global_head_dim`` (a KeyError without it), at the top level or in text_config."""
    from app.export.gguf import hub_hparams

    saved = {"model_type": "gemma4_text", "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"],
             "per_layer_config": {"1": {"head_dim": 32, "num_key_value_heads": 1}}}
    assert hub_hparams(saved) == {**saved, "global_head_dim": 32, "num_global_key_value_heads": 1}
    nested = {"model_type": "gemma4", "text_config": saved}
    assert hub_hparams(nested)["text_config"]["global_head_dim"] == 32
    kept = {**saved, "global_head_dim": 64}  # the hub's own key wins; a sliding layer's override is not global
    assert hub_hparams(kept)["global_head_dim"] == 64
    assert "global_head_dim" not in hub_hparams({**saved, "per_layer_config": {"0": {"head_dim": 8}}})
    assert hub_hparams({"model_type": "llama"}) == {"model_type": "llama"}


def test_a_merge_is_converted_without_the_layers_transformers_never_loads():
    """A merge is written by transformers, which loads no multi-token-prediction layers (Qwen3.5's mtp.*), while the
    config still counts them: the converter's class is told there are none (it asserted on Qwen3.5), unless the
    export copied the base's (app/export/mtp.py)."""
    from conversion import get_model_class

    from app.export.gguf import _merged

    cls = get_model_class("Qwen3_5ForCausalLM")
    merged = _merged(cls)
    assert merged.no_mtp and not cls.no_mtp and issubclass(merged, cls) and merged.model_arch == cls.model_arch
    assert not _merged(cls, keep_mtp=True).no_mtp


def test_the_tokenizer_files_keep_the_bases_class_and_sentencepiece_model(tmp_path):
    """transformers 5 writes the class it loaded (TokenizersBackend for Phi-4's GPT2Tokenizer) and no tokenizer.model
    (Gemma 3's); the converter reads both, so they are put back as the base has them."""
    from tiny import build_tokenizer

    from app.export.bundle import SENTENCEPIECE, keep_hub_tokenizer

    base, dest = tmp_path / "base", tmp_path / "dest"
    tok = build_tokenizer(base, tokenizer_class="GPT2Tokenizer")
    (base / SENTENCEPIECE).write_bytes(b"spm bytes")
    tok.save_pretrained(dest)
    assert json.loads((dest / "tokenizer_config.json").read_text())["tokenizer_class"] != "GPT2Tokenizer"
    keep_hub_tokenizer(str(base), dest, local_only=True)
    saved = json.loads((dest / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "GPT2Tokenizer" and saved["eos_token"] == tok.eos_token
    assert (dest / SENTENCEPIECE).read_bytes() == b"spm bytes"
    (dest / SENTENCEPIECE).write_bytes(b"the run's own")  # one written already stays
    keep_hub_tokenizer(str(base), dest, local_only=True)
    assert (dest / SENTENCEPIECE).read_bytes() == b"the run's own"


def test_a_tokenizer_the_converter_cannot_read_is_one_line(tmp_path):
    """A Gemma 3 whose folder has its tokenizer.json but not its SentencePiece model: the converter falls back to
    reading it as a BPE it does not know (NotImplementedError deep inside): one line, no traceback."""
    from tiny import DENSE, build_from_config, build_tokenizer

    from app.export.gguf import convert, pre_tokenizer

    build_tokenizer(tmp_path / "tok", kind="byte_fallback", eos="<end_of_turn>")
    model = build_from_config("gemma3_text", tmp_path / "gemma3", tmp_path / "tok",
                              **{**DENSE, "head_dim": 16, "query_pre_attn_scalar": 16})
    assert pre_tokenizer(model) is None  # SentencePiece's kind: no pre-tokenizer to declare
    with pytest.raises(UserError, match=r"converter cannot convert this model \(NotImplementedError: BPE "
                                        r"pre-tokenizer was not recognized.*export --format merged"):
        convert(model, tmp_path / "m.gguf", "f16", None, "m")
