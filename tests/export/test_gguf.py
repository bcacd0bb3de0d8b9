"""app/export/gguf.py's decisions for vision-language models: which architectures get a projector file, the tensor
names the converter reads, the projector's type, and a Gemma 3 llama.cpp would compute differently."""

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
    from app.export.gguf import OUTTYPES, projector_outtype

    assert {t: projector_outtype(t) for t in OUTTYPES} == {"f16": "f16", "bf16": "bf16", "q8_0": "f16", "f32": "f32"}


def test_modelfile_names_the_projector_in_a_second_from(tiny_models, tmp_path):
    from transformers import AutoTokenizer

    from app.export.bundle import modelfile

    tok = AutoTokenizer.from_pretrained(tiny_models["qwen2"])
    text, notes = modelfile(tok, "m-f16.gguf", None, tmp_path, projector="mmproj-m-f16.gguf")
    assert text.startswith("FROM ./m-f16.gguf\nFROM ./mmproj-m-f16.gguf\n\n")
    assert any("second FROM" in n and "llama-server --mmproj" in n for n in notes)
    plain, plain_notes = modelfile(tok, "m-f16.gguf", None, tmp_path)
    assert plain.startswith("FROM ./m-f16.gguf\n\n") and "mmproj" not in plain + " ".join(plain_notes)
