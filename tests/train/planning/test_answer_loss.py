"""SFT on conversations trains on the assistant's answers only: TRL masks every assistant turn where it can (a chat
template it ships a training variant of), else each conversation trains on its last answer; the system prompt and
the user's words never carry loss. ``training.assistant_only_loss=false`` trains on every token. Checked on the
labels TRL's own collator gives the trainer the run builds."""

import json
from dataclasses import replace

import pytest

from app.config.build import build_config
from app.data.splits import build_splits
from app.train.planning.plan import make_plan

SYSTEM = "You are a terse calculator."


@pytest.fixture()
def chats(tmp_path):
    rows = [{"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": f"What is {a} plus {b}?"},
                          {"role": "assistant", "content": f"First answer {a + b}"},
                          {"role": "user", "content": "And twice that?"},
                          {"role": "assistant", "content": f"Second answer {2 * (a + b)}"}]}
            for a in range(6) for b in range(5)]
    p = tmp_path / "chats.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    return p


def _trained_text(model, data, tmp_path, packing: bool, *sets):
    """(plan, the text of the first row's tokens that carry loss, the row's whole text)."""
    from app.train.methods.sft import build_sft_trainer
    from app.train.running.build import load_model

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(model)}, "data": {"dataset": str(data)},
                        "runtime": {"local_only": True, "device": "cpu"}, "training": {"max_steps": 1}}, sets=list(sets))
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    plan = replace(make_plan(cfg, train, det, offline=True), packing=packing)
    loaded = load_model(plan)
    trainer = build_sft_trainer(plan, loaded.model, loaded.tokenizer, plan.train_ds, tmp_path / "run")
    batch = trainer.data_collator([trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    tok = loaded.tokenizer
    return plan, tok.decode(ids[labels != -100]), tok.decode(ids)


@pytest.mark.parametrize("packing", [False, True])
def test_every_answer_trains_where_trl_masks_turns(tiny_model, chats, tmp_path, packing):
    plan, trained, whole = _trained_text(tiny_model, chats, tmp_path, packing, "model.chat_template=qwen2_5")
    assert plan.cfg.training.assistant_only_loss is True
    assert any("assistant's turns only" in a.reason for a in plan.adjustments)
    assert "First answer" in trained and "Second answer" in trained  # both answers
    assert SYSTEM in whole and SYSTEM not in trained and "plus" not in trained and "twice" not in trained


def test_the_last_answer_trains_where_the_template_marks_no_turns(tiny_model, chats, tmp_path):
    plan, trained, whole = _trained_text(tiny_model, chats, tmp_path, False)  # the fixture's own ChatML: no markers
    assert any("last answer only" in a.reason and "TRL ships no training template" in a.reason
               for a in plan.adjustments)
    assert "Second answer" in trained and "First answer" not in trained and "First answer" in whole
    assert SYSTEM in whole and SYSTEM not in trained and "twice" not in trained


def test_every_token_trains_when_turned_off(tiny_model, chats, tmp_path):
    plan, trained, _ = _trained_text(tiny_model, chats, tmp_path, False, "training.assistant_only_loss=false")
    assert plan.cfg.training.assistant_only_loss is False
    assert SYSTEM in trained and "twice" in trained and "Second answer" in trained


def test_a_conversation_without_a_template_splits_into_plain_prompt_and_answer(chats):
    from datasets import load_dataset

    from app.data.convert import to_sft
    from app.data.detect import detect_fields

    ds = load_dataset("json", data_files=str(chats), split="train")
    det = detect_fields(ds)

    class NoTemplate:
        chat_template = None

    row = to_sft(ds, det, NoTemplate(), None, answers="last")[0]
    assert row["prompt"].startswith("System: ") and row["prompt"].endswith("Assistant: First answer 0\n\nUser: And twice that?")
    assert row["completion"] == "\nSecond answer 0"  # the prompt the held-out rows ask, and what follows it
