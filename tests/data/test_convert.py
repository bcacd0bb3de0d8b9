"""to_grpo / to_sft output shapes for TRL, with a tokenizer that has a chat template and one that does not."""

from __future__ import annotations

import copy
import json

import pytest
from repo_paths import SCHEMAS

from app.data import DataError, detect_fields, prompt_text, resolve_dataset, to_grpo, to_sft
from app.data.convert import normalize_messages, reference_text

CORPUS = SCHEMAS
SYS = "Answer briefly. End with 'Final answer: <answer>'."


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """(with chat template, without) -- built locally, no hub."""
    import tiny

    chat = tiny.build_tokenizer(tmp_path_factory.mktemp("tok"))
    plain = copy.deepcopy(chat)
    plain.chat_template = None
    assert chat.chat_template and not plain.chat_template
    return chat, plain


def _load(name):
    ds = resolve_dataset(str(CORPUS / name))["train"]
    return ds, detect_fields(ds)


def _is_messages(v):
    return isinstance(v, list) and all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in v)


def test_grpo_conversational_and_plain(tokenizers):
    chat, plain = tokenizers
    ds, det = _load("gsm8k.jsonl")
    g = to_grpo(ds, det, chat, SYS)
    assert g.column_names == ["prompt", "reference"] and len(g) == len(ds)
    p = g[0]["prompt"]
    assert _is_messages(p) and [m["role"] for m in p] == ["system", "user"]
    assert p[0]["content"] == SYS and p[1]["content"] == ds[0]["question"]
    assert g[0]["reference"] == ds[0]["answer"] and "####" in g[0]["reference"]  # kept whole
    # the prompt goes through the real chat template
    rendered = chat.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
    assert ds[0]["question"] in rendered and rendered.endswith("<|im_start|>assistant\n")

    g2 = to_grpo(ds, det, plain, SYS)
    assert g2.column_names == ["prompt", "reference"]
    assert g2[0]["prompt"] == f"{SYS}\n\n{ds[0]['question']}"
    g3 = to_grpo(ds, det, plain, None)
    assert g3[0]["prompt"] == ds[0]["question"]


def test_grpo_text_only_reference_is_none(tokenizers):
    ds, det = _load("text_only.jsonl")
    g = to_grpo(ds, det, tokenizers[0], SYS)
    assert all(r is None for r in g["reference"])


def test_grpo_chat_data_prompt_is_turns_before_last_answer(tokenizers):
    ds, det = _load("sharegpt.json")
    g = to_grpo(ds, det, tokenizers[0], SYS)
    roles = [m["role"] for m in g[0]["prompt"]]
    assert roles == ["system", "user", "assistant", "user"]  # ShareGPT human/gpt normalised
    g2 = to_grpo(ds, det, tokenizers[1], None)
    assert g2[0]["prompt"].startswith("User: ") and "Assistant: " in g2[0]["prompt"]


def test_grpo_merges_data_system_turn(tokenizers):
    ds, det = _load("messages.jsonl")
    p = to_grpo(ds, det, tokenizers[0], SYS)[0]["prompt"]
    assert [m["role"] for m in p] == ["system", "user"]
    assert p[0]["content"].startswith(SYS) and "patient tutor" in p[0]["content"]


def test_sft_prompt_completion_conversational_and_plain(tokenizers):
    chat, plain = tokenizers
    ds, det = _load("alpaca.json")
    s = to_sft(ds, det, chat, None)
    assert s.column_names == ["prompt", "completion"]
    row = s[0]
    assert _is_messages(row["prompt"]) and row["prompt"][-1]["role"] == "user"
    assert row["completion"] == [{"role": "assistant", "content": ds[0]["output"]}]
    assert ds[0]["instruction"] in row["prompt"][-1]["content"] and ds[0]["input"] in row["prompt"][-1]["content"]
    s2 = to_sft(ds, det, plain, SYS)
    assert isinstance(s2[0]["prompt"], str) and s2[0]["prompt"].startswith(SYS)
    assert s2[0]["completion"] == "\n" + ds[0]["output"]


def test_sft_uses_worked_solution_when_reference_is_short(tokenizers):
    ds, det = _load("openmathinstruct2.jsonl")
    assert det.reference_field == "expected_answer" and det.solution_field == "generated_solution"
    s = to_sft(ds, det, tokenizers[0], None)
    assert s[0]["completion"][0]["content"] == ds[0]["generated_solution"]
    assert to_grpo(ds, det, tokenizers[0], None)[0]["reference"] == ds[0]["expected_answer"]


def test_sft_chat_data_messages_or_text(tokenizers):
    chat, plain = tokenizers
    ds, det = _load("sharegpt.json")
    s = to_sft(ds, det, chat, None)
    assert s.column_names == ["messages"] and _is_messages(s[0]["messages"])
    assert [m["role"] for m in s[0]["messages"]] == ["user", "assistant", "user", "assistant"]
    chat.apply_chat_template(s[0]["messages"], tokenize=False)
    s2 = to_sft(ds, det, plain, None)
    assert s2.column_names == ["text"] and "Assistant: " in s2[0]["text"]


def test_sft_text_only(tokenizers):
    ds, det = _load("text_only.jsonl")
    s = to_sft(ds, det, tokenizers[0], SYS)
    assert s.column_names == ["text"] and s[0]["text"] == ds[0]["text"]


def test_sft_output_is_accepted_by_trl_tokenisation(tokenizers):
    """TRL's own helpers recognise the formats (conversational vs plain)."""
    from trl.data_utils import is_conversational

    chat, plain = tokenizers
    ds, det = _load("gsm8k.jsonl")
    assert is_conversational(to_sft(ds, det, chat, None)[0])
    assert not is_conversational(to_sft(ds, det, plain, None)[0])
    assert is_conversational(to_grpo(ds, det, chat, SYS)[0])


def test_prompt_text_joins_contexts_in_order():
    ds, det = _load("squad.jsonl")
    row = ds[0]
    text = prompt_text(row, det)
    assert text.index(row["context"]) < text.index(row["question"])  # passage first
    assert reference_text(row, det) == row["answers"]["text"][0]
    ds, det = _load("arc.jsonl")
    text = prompt_text(ds[0], det)
    assert text.startswith(ds[0]["question"]) and "\nB. a ruler" in text
    assert reference_text(ds[0], det) == ds[0]["answerKey"]
    ds, det = _load("mmlu.parquet")
    assert reference_text(ds[0], det) == "A"  # integer index -> option letter shown in the prompt
    ds, det = _load("dolly.jsonl")
    assert prompt_text(ds[0], det) == ds[0]["instruction"]  # empty context is skipped
    ds, det = _load("pubmedqa.jsonl")
    assert reference_text(ds[0], det) in ("yes", "no", "maybe")
    assert ds[0]["context"]["contexts"][1] in prompt_text(ds[0], det)


def test_rows_with_empty_prompt_are_dropped_and_all_empty_is_an_error(tmp_path, tokenizers):
    p = tmp_path / "d.jsonl"
    rows = [{"question": "What is 2+2?" if i % 2 else "", "answer": "4"} for i in range(10)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = resolve_dataset(str(p))["train"]
    det = detect_fields(ds)
    assert len(to_grpo(ds, det, tokenizers[0], None)) == 5
    with pytest.raises(DataError, match="empty"):
        to_grpo(ds.filter(lambda r: not r["question"]), det, tokenizers[0], None)


def test_normalize_messages_dialects():
    msgs = normalize_messages([{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"},
                               {"role": "user", "content": [{"type": "text", "text": "part"}]}])
    assert msgs == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "part"}]
