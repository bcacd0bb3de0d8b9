"""The chat template read off as turns (for Ollama's TEMPLATE and stops), checked against transformers' rendering
of real template families, and the GGUF pre-tokenizer proof. Fast: tokenizers only."""

import json
import sys

import pytest

from app.errors import UserError
from app.export import template as tpl

LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
GEMMA = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
         "supported') }}{% endif %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
         "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
QWEN25 = ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
          "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
          "{%- endif %}{%- for message in messages %}{%- if message.role != 'system' %}{{- '<|im_start|>' + "
          "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# a template that rewrites earlier turns (drops the reasoning of past answers): not a plain sequence of turns
REWRITES = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and not loop.last %}"
            "{{ m['content'].split('</think>')[-1] }}{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tok(tiny_models):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tiny_models["qwen2"])
    t.add_special_tokens({"additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                                        "<start_of_turn>", "<end_of_turn>"]})
    return t


def _with(tok, template):
    tok.chat_template = template
    return tok


CONVERSATIONS = [
    [{"role": "user", "content": "Tom has 3 apples."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "u"},
     {"role": "assistant", "content": "a"}, {"role": "user", "content": "u2"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
]


@pytest.mark.parametrize("name", ["chatml", "llama3", "qwen25", "demo"])
def test_turns_render_what_transformers_renders(tok, name):
    from tiny import CHATML

    from app.demo.recipe import base_model_path

    if name == "demo":
        from transformers import AutoTokenizer

        t = AutoTokenizer.from_pretrained(base_model_path())
    else:
        t = _with(tok, {"chatml": CHATML, "llama3": LLAMA3, "qwen25": QWEN25}[name])
    fmt = tpl.derive(t)
    assert fmt is not None
    for conv in CONVERSATIONS:  # beyond the conversations derive() checked itself
        for gen in (True, False):
            assert fmt.render(conv, gen) == t.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
    if name == "qwen25":
        assert fmt.default_system == "You are a helpful assistant."
    else:
        assert fmt.default_system is None


def test_go_template_and_stops_for_chatml(tok):
    from tiny import CHATML

    t = _with(tok, CHATML)
    fmt = tpl.derive(t)
    assert tpl.go_template(fmt) == (
        "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ range .Messages }}"
        '{{ if eq .Role "user" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n'
        '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n{{ .Content }}<|im_end|>\n'
        "{{ end }}{{ end }}<|im_start|>assistant\n")
    stops = tpl.stop_strings(t, fmt, [t.eos_token_id])
    assert "<|im_end|>" in stops and "<|im_start|>" in stops  # the end of a turn, and a new turn beginning


def test_llama3_stops_and_bos_left_to_the_tokenizer(tok):
    t = _with(tok, LLAMA3)
    fmt = tpl.derive(t)
    assert fmt.start == t.bos_token
    assert not tpl.go_template(fmt, bos=t.bos_token).startswith(t.bos_token)
    assert tpl.go_template(fmt).startswith(t.bos_token)
    assert "<|eot_id|>" in tpl.stop_strings(t, fmt, [])


def test_templates_that_are_not_a_sequence_of_turns_get_none(tok):
    assert tpl.derive(_with(tok, GEMMA)) is None  # refuses a system turn
    assert tpl.derive(_with(tok, REWRITES)) is None  # rewrites earlier answers
    assert tpl.derive(_with(tok, None)) is None


def test_go_template_escapes_braces():
    fmt = tpl.TurnFormat(start="", prefix={"system": "{{", "user": "U:", "assistant": "A:"},
                         suffix={"system": "\n", "user": "\n", "assistant": "\n"}, generation="A:")
    assert '{{ "{{" }}' in tpl.go_template(fmt)


# ---------------------------------------------------------------------------------------------- pre-tokenizer


def _tokenizer_json(pre, normalizer=None, model="BPE"):
    return {"normalizer": normalizer, "pre_tokenizer": pre, "model": {"type": model}}


def test_only_provable_pre_tokenizers_are_declared():
    from app.export.gguf import KNOWN_SPLITS, known_pre_tokenizer

    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    assert known_pre_tokenizer(_tokenizer_json(gpt2)) == "gpt-2"
    assert known_pre_tokenizer(_tokenizer_json({"type": "Sequence", "pretokenizers": [gpt2]})) == "gpt-2"
    assert known_pre_tokenizer(_tokenizer_json({**gpt2, "add_prefix_space": True})) is None
    assert known_pre_tokenizer(_tokenizer_json({**gpt2, "use_regex": False})) is None  # no split at all
    assert known_pre_tokenizer(_tokenizer_json(gpt2, normalizer={"type": "NFC"})) is None
    assert known_pre_tokenizer(_tokenizer_json({"type": "Metaspace"})) is None
    assert known_pre_tokenizer(_tokenizer_json(gpt2, model="WordPiece")) is None
    qwen_regex = next(k for k, v in KNOWN_SPLITS.items() if v == "qwen2")
    split = {"type": "Split", "pattern": {"Regex": qwen_regex}, "behavior": "Isolated", "invert": False}
    bl = {**gpt2, "use_regex": False}
    qwen = {"type": "Sequence", "pretokenizers": [split, bl]}
    assert known_pre_tokenizer(_tokenizer_json(qwen, normalizer={"type": "NFC"})) == "qwen2"
    assert known_pre_tokenizer(_tokenizer_json(qwen, normalizer={"type": "NFKC"})) is None
    other = {"type": "Sequence", "pretokenizers": [{**split, "pattern": {"Regex": qwen_regex + "|x"}}, bl]}
    assert known_pre_tokenizer(_tokenizer_json(other)) is None


def test_unknown_bpe_tokenizer_is_refused_by_name(tiny_models, tmp_path):
    pytest.importorskip("conversion")
    import shutil

    from app.demo.recipe import base_model_path
    from app.export.gguf import GPT2_PRE, pre_tokenizer

    assert pre_tokenizer(base_model_path()) == GPT2_PRE  # the shipped model's byte-level BPE: declared
    # transformers 5 gives a Qwen2 model Qwen2's split (not the fixture's tokenizer.json): llama.cpp's qwen2
    assert pre_tokenizer(tiny_models["qwen2"]) == "qwen2"
    d = tmp_path / "tok"
    shutil.copytree(base_model_path(), d)
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(UserError, match="does not know the tokenizer in .* Sequence pre-tokenizer it has no proven"):
        pre_tokenizer(d)


def test_missing_converter_names_the_extra(monkeypatch):
    from app.export.gguf import converter

    monkeypatch.setitem(sys.modules, "conversion", None)  # import conversion -> ImportError
    with pytest.raises(UserError, match=r"pip install 'qlora-app\[gguf\]'"):
        converter()


def test_unsupported_architecture_is_named():
    pytest.importorskip("conversion")
    from types import SimpleNamespace

    from app.export.gguf import check_architecture

    assert check_architecture(SimpleNamespace(architectures=["Qwen3ForCausalLM"])) == "Qwen3ForCausalLM"
    with pytest.raises(UserError, match="does not support the architecture FancyNetForCausalLM; export --format"):
        check_architecture(SimpleNamespace(architectures=["FancyNetForCausalLM"]))
