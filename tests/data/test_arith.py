"""The built-in `arith` dataset, the shipped tiny base model and the script that rebuilds it."""

import random
import re

import pytest

from app.config.builtin import shipped_dir
from app.data import arith
from app.demo import build_base, recipe


def _recompute(row: dict) -> int:
    """Solve the question independently of the worked solution: the two numbers, and the operation from the
    question's wording (every subtraction template asks what is 'left', 'still' there, or 'needed')."""
    a, b = (int(x) for x in re.findall(r"\d+", row["question"]))
    subtract = any(w in row["question"] for w in ("left?", "still in", "need?"))
    return a - b if subtract else a + b


def test_generator_is_deterministic_per_seed():
    assert arith.generate_arith(50, seed=3) == arith.generate_arith(50, seed=3)
    assert arith.generate_arith(50, seed=3) != arith.generate_arith(50, seed=4)
    assert arith.generate_arith(0, seed=3) == []


def test_answers_are_arithmetically_right():
    train, test = arith.split_rows()
    for row in train + test:
        n = arith.reference_number(row["answer"])
        assert n == _recompute(row), row
        assert 0 <= n <= 2 * arith.MAX_OPERAND
        assert check_row(row), row  # the worked equation agrees with the #### line
        assert row["answer"].endswith(f"\n#### {n}")


def check_row(row: dict) -> bool:
    """True when the worked equation is arithmetically right and agrees with the #### number."""
    m = arith._EQ_RE.search(row["answer"])
    if not m:
        return False
    a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
    return (a + b if op == "+" else a - b) == c == arith.reference_number(row["answer"])


def test_check_row_rejects_a_wrong_solution():
    row = {"question": "q", "answer": "Tom has 3 pens and buys 4 more. 3 + 4 = 8.\n#### 8"}
    assert not check_row(row)


def test_splits_are_fixed_sized_distinct_and_disjoint():
    ds = arith.arith_dataset()
    assert set(ds) == {"train", "test"}
    assert ds["train"].column_names == ["question", "answer"]
    assert (len(ds["train"]), len(ds["test"])) == (arith.TRAIN_SIZE, arith.TEST_SIZE)
    train_q, test_q = set(ds["train"]["question"]), set(ds["test"]["question"])
    assert len(train_q) == arith.TRAIN_SIZE and len(test_q) == arith.TEST_SIZE
    assert not train_q & test_q
    assert ds["test"][0] == arith.arith_dataset()["test"][0]


def test_both_operations_and_all_templates_are_covered():
    train, _ = arith.split_rows()
    ops = {"+" if " + " in r["answer"] else "-" for r in train}
    assert ops == {"+", "-"}
    firsts = {r["question"].split(".")[0].split()[-1] for r in train}  # crude template fingerprint
    assert len(firsts) > 5


def test_solution_with_final_answer():
    ans = "Tom has 3 pens and buys 4 more. 3 + 4 = 7.\n#### 7"
    assert arith.solution_with_final_answer(ans) == "Tom has 3 pens and buys 4 more. 3 + 4 = 7.\nFinal answer: 7"
    with pytest.raises(ValueError):
        arith.reference_number("no marker here")


def test_base_pretraining_text_never_uses_the_target_format_and_avoids_test_questions():
    docs = build_base.build_corpus(n_chats=300)
    chats = [d for kind, d in docs if kind == "chat"]
    replies = [m[-1]["content"] for m in chats]
    assert replies and not any("Final answer" in r for r in replies)
    _, test = arith.split_rows()
    test_q = {r["question"] for r in test}
    assert not any(m[-2]["content"] in test_q for m in chats)
    # Mostly wrong, sometimes right: the base must leave room to improve yet give GRPO correct samples.
    rows = arith.generate_arith(400, seed=9)
    rng = random.Random(0)
    right = sum(build_base.flawed_solution(r, rng).endswith(f"is {arith.reference_number(r['answer'])}.") for r in rows)
    assert 0.15 < right / len(rows) < 0.6


def test_shipped_model_loads_offline_and_speaks_the_chat_template():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = recipe.base_model_path(build_if_missing=False)
    assert path == shipped_dir(), "app/assets/arith-base is missing; run python -m app.demo.build_base"
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert (path / "model.safetensors").stat().st_size < 5_000_000
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tom has 3 pens."}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.startswith(tok.bos_token) and text.endswith("<|assistant|>\n")
    assert "Be brief." in text and "Tom has 3 pens." in text
    # Byte-level BPE: the reward parses numbers out of decoded text, so decoding must be exact.
    s = "Tom has 3 pens and buys 4 more. 3 + 4 = 7.\nFinal answer: 7"
    assert tok.decode(tok(s, add_special_tokens=False)["input_ids"]) == s
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=30, do_sample=False)
    reply = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert re.search(r"\d", reply)  # it answers in the problem language, with numbers
    assert out[0, -1].item() in (tok.eos_token_id, tok.pad_token_id) or out.shape[1] - enc["input_ids"].shape[1] == 30
    assert torch.isfinite(model(**enc).logits).all()


def test_shipped_model_loads_in_4bit_on_cpu():
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(shipped_dir(), quantization_config=q, dtype=torch.float32,
                                                 device_map={"": "cpu"})  # explicit: on a GPU machine too
    assert type(model.model.layers[0].mlp.up_proj).__name__ == "Linear4bit"
    assert torch.isfinite(model(input_ids=torch.tensor([[1, 5, 6, 7]])).logits).all()


def test_build_base_code_path_produces_a_loadable_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = build_base.build(tmp_path / "m", steps=3, batch_size=4, n_chats=40, log_every=0)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert model.config.model_type == "llama" and model.config.vocab_size == len(tok)
    assert tok.chat_template and tok.pad_token_id != tok.eos_token_id


def test_recipe_presets_validate_as_app_configs(tmp_path):
    from app.config.build import build_config
    from app.config.resolve import resolve

    grpo = resolve(build_config(preset=recipe.grpo_preset(model_path=tmp_path)))
    assert grpo.method == "grpo" and grpo.lora.init_from is None and grpo.model.load_in_4bit
    assert grpo.model.name_or_path == str(tmp_path) and grpo.data.dataset == "arith"
    assert grpo.training.per_device_train_batch_size % grpo.grpo.num_generations == 0


def test_arith_sft_builtin_has_final_answer_format():
    from app.data import resolve_dataset

    plain, sft = resolve_dataset("arith"), resolve_dataset("arith-sft")
    assert plain["train"]["question"] == sft["train"]["question"] and len(sft["test"]) == len(plain["test"])
    for p, s in zip(plain["train"].select(range(20)), sft["train"].select(range(20))):
        n = p["answer"].rsplit("####", 1)[1].strip()
        assert s["answer"].endswith(f"Final answer: {n}") and "####" not in s["answer"]
