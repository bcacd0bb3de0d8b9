"""app/train/methods/sft.py: an SFT run whose every example loses its answer to training.max_length (TRL drops them)
stops with one line naming the key, not torch's "num_samples=0" traceback."""

import json

import pytest
from conftest import cli


def test_carries_loss_reads_the_labels_trl_prepared():
    from datasets import Dataset

    from app.train.methods.sft import carries_loss

    assert not carries_loss(Dataset.from_dict({"input_ids": [], "labels": []}))  # every example dropped
    masked = {"input_ids": [[1, 2, 3], [4, 5]], "labels": [[-100, -100, -100], [-100, -100]]}
    assert not carries_loss(Dataset.from_dict(masked))  # packed as they were: a loss of 0
    assert carries_loss(Dataset.from_dict({**masked, "labels": [[-100, -100, -100], [-100, 5]]}))
    assert carries_loss(Dataset.from_dict({"input_ids": [[1, 2]]}))  # labels made by the collator: not judged


@pytest.mark.slow
def test_every_answer_cut_away_by_max_length_is_one_line(tiny_model, tmp_path):
    """Conversations TRL masks turn by turn (Qwen3's template, which TRL ships a training variant of), kept whole:
    TRL cuts them to max_length itself and drops those left with no answer token."""
    import shutil

    from transformers import AutoTokenizer

    from app.model.templates import template_file

    model = tmp_path / "qwen3"
    shutil.copytree(tiny_model, model)
    tok = AutoTokenizer.from_pretrained(model)
    tok.chat_template = template_file("qwen3").read_text()
    tok.save_pretrained(model)
    data = tmp_path / "chat.jsonl"
    system = "You are a careful assistant. " * 12  # the prompt alone fills training.max_length=48
    with data.open("w") as f:
        for i in range(12):
            f.write(json.dumps({"messages": [{"role": "system", "content": system},
                                             {"role": "user", "content": f"What is {i} + 2?"},
                                             {"role": "assistant", "content": f"Final answer: {i + 2}"}]}) + "\n")
    r = cli("train", "--model", str(model), "--dataset", str(data), "--method", "sft", "--max-steps", "2",
            "--output-dir", str(tmp_path / "runs"), "--set", "training.max_length=48", "--set", "runtime.device=cpu",
            timeout=600)
    assert r.returncode == 2, r.stderr[-3000:]
    said = " ".join(r.stderr.split())
    assert "no training example keeps an answer token within training.max_length=48" in said
    assert "raise training.max_length" in said and "Traceback" not in r.stderr and "num_samples" not in r.stderr
    # with room for the answers the same data trains
    ok = cli("train", "--model", str(model), "--dataset", str(data), "--method", "sft", "--max-steps", "1",
             "--output-dir", str(tmp_path / "runs-ok"), "--set", "training.max_length=512", "--set",
             "runtime.device=cpu", "--set", "training.proof_rows=0", timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
