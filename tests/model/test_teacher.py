"""A distillation run's teacher (app/model/teacher.py): what distill.teacher names (a model, a run), each bad teacher
one line before any weight loads (missing, a run without its adapter or trained on pictures, not a causal language
model, another vocabulary), a head padded past the shared tokenizer told apart from another vocabulary and cut as it
loads, and the teacher loaded for inference."""

import json

import pytest

from app.config.schema import AppConfig, DistillSection, ModelConfig
from app.errors import UserError
from app.model.teacher import (
    causal_problem,
    cut_head,
    find_teacher,
    load_teacher,
    vocab_size,
    vocabulary_problem,
)


def _teacher(name, **kw):
    return DistillSection(teacher=str(name), **kw)


def _run(folder, images=False, adapter=True, base="org/Base-1B"):
    """A run folder as a finished run leaves it: config.yaml, and adapter/ when it finished."""
    folder.mkdir(parents=True)
    cfg = AppConfig.model_validate({"method": "sft", "model": {"name_or_path": base, "images": images}})
    (folder / "config.yaml").write_text(cfg.to_yaml())
    if adapter:
        (folder / "adapter").mkdir()
        (folder / "adapter" / "adapter_config.json").write_text(json.dumps(
            {"peft_type": "LORA", "base_model_name_or_path": base}))
    return folder


def test_a_missing_teacher_is_one_line_naming_both_kinds():
    with pytest.raises(UserError, match="pass --teacher MODEL .* or --teacher RUN"):
        find_teacher(DistillSection(), ModelConfig(), local_only=True)
    with pytest.raises(UserError, match="^teacher: model path '/no/such/teacher' not found"):
        find_teacher(_teacher("/no/such/teacher"), ModelConfig(), local_only=True)


def test_a_model_teacher_loads_4bit_unless_asked_and_never_as_the_students_pictures(tiny_models):
    student = ModelConfig(name_or_path=str(tiny_models["qwen3"]), images=True, chat_template="qwen2_5")
    src = find_teacher(_teacher(tiny_models["llama"]), student, local_only=True)
    assert src.adapter_dir is None and src.model.load_in_4bit and not src.model.images
    assert src.model.chat_template is None and src.config["model_type"] == "llama"
    assert not find_teacher(_teacher(tiny_models["llama"], teacher_4bit=False), student, True).model.load_in_4bit


def test_a_run_teacher_needs_its_adapter_and_text(tmp_path, tiny_models):
    base = str(tiny_models["llama"])
    unfinished = _run(tmp_path / "unfinished", adapter=False, base=base)
    with pytest.raises(UserError, match="has no adapter \\(it did not finish\\)"):
        find_teacher(_teacher(unfinished), ModelConfig(), local_only=True)
    pictures = _run(tmp_path / "pictures", images=True, base=base)
    with pytest.raises(UserError, match="was trained on pictures"):
        find_teacher(_teacher(pictures), ModelConfig(), local_only=True)
    gone = _run(tmp_path / "gone", base=str(tmp_path / "deleted-base"))
    with pytest.raises(UserError, match="its base: model path .* not found"):
        find_teacher(_teacher(gone), ModelConfig(), local_only=True)
    src = find_teacher(_teacher(_run(tmp_path / "done", base=base)), ModelConfig(), local_only=True)
    assert src.adapter_dir == tmp_path / "done" / "adapter" and src.model.name_or_path == base
    assert src.label.startswith("run ") and src.record()["adapter"].endswith("adapter")


@pytest.mark.parametrize("config,said", [
    ({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, "BertForMaskedLM, not a causal language model"),
    ({"model_type": "t5", "is_encoder_decoder": True, "architectures": ["T5ForConditionalGeneration"]},
     "T5ForConditionalGeneration, not a causal"),
])
def test_a_teacher_that_is_no_causal_language_model_is_one_line(tmp_path, config, said):
    from app.model.teacher import TeacherSource

    src = TeacherSource("enc", ModelConfig(name_or_path="enc"), None, config)
    assert said in causal_problem(src)
    assert causal_problem(TeacherSource("dec", ModelConfig(), None, {"model_type": "llama"})) is None
    # a vision-language model's text config says what its language model is
    assert vocab_size({"text_config": {"vocab_size": 7}, "model_type": "x"}) == 7


def _padded(tmp_path, tiny_models, rows):
    """A llama teacher on the tiny models' own tokenizer, its head padded to ``rows`` rows."""
    import tiny

    return tiny.build_from_config("llama", tmp_path / f"padded-{rows}", tiny_models["llama"].parent / "tok",
                                  vocab_size=rows,
                                  hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)


def test_a_padded_head_is_the_same_vocabulary_and_another_tokenizer_is_not(tmp_path, tiny_models):
    """Qwen2.5-7B's head has 152,064 rows and 1.5B's 151,936 on one tokenizer: the larger is cut to the student's;
    a tokenizer of its own is refused naming both sizes (and the cross-tokenizer trainer that could take it)."""
    import tiny
    from transformers import AutoTokenizer

    student = tiny_models["llama"]
    tok = AutoTokenizer.from_pretrained(student)
    rows = vocab_size(json.loads((student / "config.json").read_text()))
    padded = _padded(tmp_path, tiny_models, rows + 36)
    src = find_teacher(_teacher(padded), ModelConfig(name_or_path=str(student)), True)
    assert vocabulary_problem(src, str(student), rows, tok, AutoTokenizer.from_pretrained(padded)) == (None, rows)
    assert vocabulary_problem(src, str(student), rows + 36, tok, tok) == (None, None)  # same sizes: nothing to say
    smaller, _ = vocabulary_problem(src, str(student), rows + 100, tok, tok)
    assert "smaller head" in smaller
    tiny.build_tokenizer(tmp_path / "other-tok", extra=["<x1>", "<x2>"])
    other = AutoTokenizer.from_pretrained(tmp_path / "other-tok")
    assert len(other) == len(tok)  # as Llama 2's and Mistral's: the same size, other tokens
    problem, keep = vocabulary_problem(src, str(student), rows, tok, other)
    assert keep is None and f"vocabulary of {rows + 36} tokens" in problem and f"'{student}' {rows}" in problem
    assert "GOLD" in problem
    same_size, _ = vocabulary_problem(src, str(student), rows + 36, tok, other)
    assert f"both {rows + 36} tokens, not the same ones" in same_size
    # without the tokenizers on disk, the head sizes alone
    assert vocabulary_problem(src, str(student), rows + 36, None, None) == (None, None)
    assert "vocabulary of" in vocabulary_problem(src, str(student), rows, None, tok)[0]


def test_a_padded_head_is_cut_as_it_loads_and_keeps_every_real_tokens_logit(tmp_path, tiny_models):
    import torch

    rows = vocab_size(json.loads((tiny_models["llama"] / "config.json").read_text()))
    padded = _padded(tmp_path, tiny_models, rows + 36)
    src = find_teacher(_teacher(padded, teacher_4bit=False), ModelConfig(), True)
    whole = load_teacher(src, None, True, device="cpu")
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        full = whole(input_ids=ids).logits
    cut_head(whole, rows)
    with torch.no_grad():
        kept = whole(input_ids=ids).logits
    assert full.shape[-1] == rows + 36 and kept.shape[-1] == rows
    assert torch.equal(kept, full[..., :rows]) and whole.config.vocab_size == rows
    loaded = load_teacher(src, None, True, keep_rows=rows, device="cpu")
    assert loaded.get_output_embeddings().weight.shape[0] == rows
    assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
