"""A distillation run's plan counts two models (app/train/planning/teacher.py, memory.py): the teacher's weights
and forward in the estimate, a card the pair cannot share refused naming the teacher, the ladder's distillation
rungs; and every bad teacher is one line, exit 2, before anything loads and without a run folder."""

import json

import pytest
from conftest import cli_here, plan_for

from app.config.build import build_config
from app.errors import UserError
from app.train.planning.memory import fit_problem
from app.train.planning.oom import next_rung

QWEN_7B = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
           "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
           "vocab_size": 152064, "tie_word_embeddings": False}  # Qwen2.5-7B-Instruct's published config


@pytest.fixture()
def teacher_7b(tmp_path):
    d = tmp_path / "Qwen2.5-7B-Instruct"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(QWEN_7B))
    return d


def _cfg(teacher, **distill):
    return build_config({"method": "distill", "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"},
                         "distill": {"teacher": str(teacher), **distill}, "data": {"dataset": "gsm8k"}})


def test_the_plan_counts_the_teacher_beside_the_student(teacher_7b):
    """A 4-bit 7B teacher and a 4-bit 1.5B student with LoRA fit 12 GB together; the teacher's weights are about
    5.5 GB in 4-bit (its untied 152k-row embedding and head stay 16-bit) and 4x in 16-bit."""
    plan = plan_for(_cfg(teacher_7b), gpu_gb=12)
    est = plan.estimate
    assert 4.8 < est["teacher_gb"] < 6.0 and est["weights_gb"] < 1.4
    assert est["total_gb"] > est["teacher_gb"] + est["weights_gb"] and plan.verdict == "fits"
    assert plan.teacher.source.model.load_in_4bit and plan.status_fields()["teacher"]["teacher"] == str(teacher_7b)
    alone = plan_for(build_config({"method": "sft", "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"}}),
                     gpu_gb=12, packing=False)
    assert est["total_gb"] > alone.estimate["total_gb"] + est["teacher_gb"] - 0.5
    sixteen = plan_for(_cfg(teacher_7b, teacher_4bit=False), gpu_gb=24).estimate
    assert 13.5 < sixteen["teacher_gb"] < 15.5 and sixteen["total_gb"] > est["total_gb"] + 8
    longer = plan_for(_cfg(teacher_7b, max_completion_length=1024), gpu_gb=24).estimate
    assert longer["activations_gb"] > est["activations_gb"] and longer["generation_gb"] > est["generation_gb"]


def test_a_card_the_pair_cannot_share_is_refused_naming_the_teacher(teacher_7b):
    with pytest.raises(UserError, match=r"the teacher \(.*Qwen2.5-7B-Instruct\) takes 14.\d GB of it beside the "
                                        r"trained model's 1.0 GB of weights; .*load it in 4-bit"):
        plan_for(_cfg(teacher_7b, teacher_4bit=False), gpu_gb=12)
    with pytest.raises(UserError, match=r"even with .*distill.max_completion_length=\d+ .*the teacher .* 16-bit"):
        plan_for(_cfg(teacher_7b, teacher_4bit=False), gpu_gb=16)
    est = plan_for(_cfg(teacher_7b), gpu_gb=12).estimate
    assert fit_problem(est, _cfg(teacher_7b), 12) is None


def test_the_ladder_steps_down_a_distillation_by_its_own_settings(teacher_7b):
    from dataclasses import replace

    from app.train.planning.plan import replan

    plan = plan_for(_cfg(teacher_7b, max_completion_length=256), gpu_gb=24)
    plan = replace(plan, cfg=plan.cfg.model_copy(update={"training": plan.cfg.training.model_copy(
        update={"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2})}))
    said = []
    for _ in range(6):
        rung = next_rung(plan)
        if rung is None:
            break
        said.append(rung[1])
        plan = replan(plan, *rung)
    assert said[0].startswith("per-device batch 1 with 4 accumulation steps")
    assert any("answers cut at 128 tokens" in s for s in said) and not any("offloading" in s for s in said)
    assert plan.cfg.distill.max_completion_length == 64 and plan.cfg.training.max_length == 1024


@pytest.mark.parametrize("teacher,said", [
    (None, "method distill learns from a teacher: pass --teacher MODEL"),
    ("./no-such-folder", "teacher: model path './no-such-folder' not found"),
    ("org/Not-Cached-7B", "teacher: model 'org/Not-Cached-7B' is not in the local HF cache and --local-only forbids "
                          "downloads; run 'qlora-app prefetch --model org/Not-Cached-7B'"),
    ("./no-such.gguf", "teacher file './no-such.gguf' does not exist; pass a .gguf file"),
    ("http://127.0.0.1:9/v1", "the teacher http://127.0.0.1:9/v1 failed listing its models: it is not answering "
                              "(connection refused or lost), after retries; start it, or check --teacher (probed "
                              "before the student loads)"),
])
def test_a_bad_teacher_is_one_line_and_no_run_folder(tmp_path, tiny_models, teacher, said):
    args = ["train", "--method", "distill", "--model", tiny_models["llama"], "--dataset", "arith", "--local-only",
            "--max-steps", "1", "--output-dir", tmp_path / "runs", *(["--teacher", teacher] if teacher else [])]
    for extra in ([], ["--dry-run"]):
        r = cli_here(*args, *extra, cwd=tmp_path)
        assert r.returncode == 2 and said in " ".join((r.stdout + r.stderr).split()) and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_another_vocabulary_and_an_encoder_are_refused_before_loading(tmp_path, tiny_models):
    import tiny

    tiny.build_tokenizer(tmp_path / "tok", extra=["<a>", "<b>", "<c>"])
    other = tiny.build_model("qwen2", tmp_path / "other", tmp_path / "tok")
    encoder = tmp_path / "encoder"
    encoder.mkdir()
    (encoder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"],
                                                     "vocab_size": 400}))
    (encoder / "model.safetensors").write_bytes(b"x")
    for teacher, said in ((other, "not the same ones"), (encoder, "not a causal language model")):
        r = cli_here("train", "--method", "distill", "--model", tiny_models["llama"], "--teacher", teacher,
                     "--dataset", "arith", "--local-only", "--max-steps", "1", "--output-dir", tmp_path / "runs",
                     cwd=tmp_path)
        assert r.returncode == 2 and said in " ".join((r.stdout + r.stderr).split()), r.stdout + r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_run_teacher_is_asked_with_its_own_system_prompt(tmp_path, tiny_model, math_jsonl):
    """A run trained with a system prompt teaches as it was trained: the plan says so and records it, each training
    row carries the teacher's prompt (its system turn first, the student's prompt without one), and
    distill.teacher_system_prompt sets another (empty: none, the student's rows as they are)."""
    from fakes import SYSTEM, make_adapter, write_run

    from app.data import build_splits
    from app.train.planning.plan import make_plan
    from app.train.planning.rows import TEACHER_PROMPT

    run = write_run(tmp_path / "teacher", tiny_model, make_adapter(tiny_model, tmp_path / "a"))
    cfg = build_config({"method": "distill", "model": {"name_or_path": str(tiny_model)},
                        "distill": {"teacher": str(run)}, "data": {"dataset": str(math_jsonl)},
                        "runtime": {"local_only": True}})
    rows, _, det = build_splits(cfg.data, 0, local_only=True)
    said = []
    plan = make_plan(cfg, rows, det, note=said.append)
    line = next(x for x in said if x.startswith("the teacher is asked with"))
    assert "its system prompt 'Solve the problem" in line and "as its run was trained" in line
    assert "the student with none" in line
    assert plan.teacher.record()["system_prompt"] == SYSTEM
    assert plan.status_fields()["teacher"]["system_prompt"] == SYSTEM
    row = plan.train_ds[0]
    assert row[TEACHER_PROMPT][0] == {"role": "system", "content": SYSTEM}
    assert row[TEACHER_PROMPT][1:] == row["prompt"] and all(m["role"] != "system" for m in row["prompt"])
    plain = make_plan(cfg.model_copy(update={"distill": cfg.distill.model_copy(
        update={"teacher_system_prompt": ""})}), rows, det)
    assert TEACHER_PROMPT not in plain.train_ds.column_names and plain.teacher.record()["system_prompt"] is None


def test_reasked_swaps_the_system_prompt_and_keeps_the_datas_own():
    from app.data.turns import reasked, with_system

    user = [{"role": "user", "content": "2+2?"}]
    assert reasked(with_system(user, "A"), "A", "B") == with_system(user, "B")
    assert reasked(with_system(user, "A"), "A", None) == user
    own = [{"role": "system", "content": "Be terse."}, *user]
    assert reasked(with_system(own, "A"), "A", "B") == with_system(own, "B")  # the data's own turn stays
    assert reasked("A\n\n2+2?", "A", "B") == "B\n\n2+2?" and reasked("2+2?", None, "B") == "B\n\n2+2?"


def test_the_on_policy_teacher_reads_its_own_prompt_before_the_same_answer(tiny_model):
    """The trainer's teacher forward sees the teacher's prompt ids, then the student's answer ids; the positions the
    loss reads (the answer's) are the teacher's hidden states after its own prompt. The student's forward is as
    TRL makes it."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM

    from app.train.methods.distill import teacher_prompt_trainer

    torch.manual_seed(0)
    teacher, student = (AutoModelForCausalLM.from_pretrained(tiny_model).eval() for _ in range(2))
    trainer = object.__new__(teacher_prompt_trainer())
    trainer.model_kwarg_keys, trainer._is_vlm = set(), False
    trainer.teacher_model = teacher
    trainer.accelerator = SimpleNamespace(unwrap_model=lambda m: m, is_main_process=True)
    student_prompt, teacher_prompt = torch.tensor([[0, 5, 6]]), torch.tensor([[7, 8, 9, 10, 5, 6]])
    answer = torch.tensor([[11, 12, 13, 14]])
    ones = torch.ones_like
    trainer._teacher_inputs = {"teacher_prompt_ids": teacher_prompt, "teacher_prompt_mask": ones(teacher_prompt),
                               "completion_ids": answer, "completion_mask": ones(answer)}
    ids = torch.cat([student_prompt, answer], 1)
    with torch.no_grad():
        got = trainer._get_last_hidden_state(teacher, ids, ones(ids), 4)
        want = teacher.base_model(input_ids=torch.cat([teacher_prompt, answer], 1)).last_hidden_state[:, :-1][:, -4:]
        plain = teacher.base_model(input_ids=ids).last_hidden_state[:, :-1][:, -4:]
        assert torch.allclose(got, want) and not torch.allclose(got, plain)
        mine = trainer._get_last_hidden_state(student, ids, ones(ids), 4)
        assert torch.allclose(mine, student.base_model(input_ids=ids).last_hidden_state[:, :-1][:, -4:])


GB = 2**30


def _fake_gguf(path, size_gb: float, layers: int = 48, context: int = 262144, vocab: int = 151936):
    """A GGUF header as Qwen3-30B-A3B's Q4_K_M file has it (layers, context, widths, vocabulary), the file extended
    (sparse) to the published file's size: what the plan reads of a teacher it never loads."""
    import gguf

    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(layers)
    w.add_context_length(context)
    w.add_embedding_length(2048)
    w.add_head_count(32)
    w.add_head_count_kv(4)
    w.add_key_length(128)
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "r+b") as f:
        f.truncate(int(size_gb * GB))
    return path


@pytest.fixture()
def gguf_30b(tmp_path):
    return _fake_gguf(tmp_path / "Qwen3-30B-A3B-Q4_K_M.gguf", 18.6)


def test_a_gguf_teacher_is_planned_outside_training_memory(gguf_30b, teacher_7b, monkeypatch):
    """The GPU estimate counts the student alone (a 7B teacher in memory adds its weights); the plan says where the
    teacher runs and what it takes of this machine's RAM; layers offloaded to the card are counted on the card."""
    monkeypatch.setattr("app.teacher.place._free_ram_gb", lambda: 64.0)
    plan = plan_for(_cfg(gguf_30b), gpu_gb=12)
    est, out = plan.estimate, plan.teacher.outside
    assert out.kind == "gguf" and out.layers == 48 and out.card_gb == 0 and not est.get("teacher_gb")
    in_memory = plan_for(_cfg(teacher_7b), gpu_gb=12).estimate
    assert est["total_gb"] < in_memory["total_gb"] - 4.5
    # 18.6 GB of weights, a 1280-token context (the run's max_length and answer budget) and its logits
    assert out.context == 1280 and 18.6 < out.ram_gb < 20.5 and out.threads >= 1
    line = plan.teacher.line()
    assert "in llama.cpp, a child process (never in training memory): a 18.60 GB file" in line
    assert "of 64.0 GB free with a 1280-token context" in line and "none on the card" in line
    assert plan.status_fields()["teacher"]["where"]["file_gb"] == pytest.approx(18.6)
    half = plan_for(_cfg(gguf_30b, teacher_gpu_layers=24), gpu_gb=24)
    assert half.teacher.outside.card_gb == pytest.approx(9.3, abs=0.01)
    assert half.estimate["teacher_gb"] == pytest.approx(9.3, abs=0.01) and half.teacher.outside.ram_gb < 11


def test_a_gguf_teacher_that_cannot_fit_in_ram_is_one_line(gguf_30b, monkeypatch):
    monkeypatch.setattr("app.teacher.place._free_ram_gb", lambda: 12.0)
    with pytest.raises(UserError, match=r"teacher Qwen3-30B-A3B-Q4_K_M.gguf needs 1\d.\d GB of RAM \(18.6 GB file "
                                        r"less 0 offloaded layers, plus a 1280-token context\) and this machine has "
                                        r"12.0 GB free; offload layers to the GPU \(distill.teacher_gpu_layers, 48 in "
                                        r"all\)"):
        plan_for(_cfg(gguf_30b), gpu_gb=24)
    with pytest.raises(UserError, match=r"distill.temperature=0.7 with a GGUF or endpoint teacher"):
        plan_for(_cfg(gguf_30b, temperature=0.7), gpu_gb=24)
    two = build_config({**_cfg(gguf_30b).model_dump(), "runtime": {"num_processes": 2}})
    with pytest.raises(UserError, match=r"this run has 2 \(each would load the file\): serve it once"):
        plan_for(two, gpu_gb=24)


@pytest.mark.slow
def test_a_gguf_of_another_vocabulary_is_refused_in_one_line_before_the_student_loads(tmp_path):
    """The GGUF's own tokenizer (llama.cpp reads it from the file's metadata) tokenizes a sample of the data
    another way than the student's: one line naming both, exit 2, no run folder."""
    pytest.importorskip("llama_cpp")
    import tiny

    from app.export.gguf import convert, pre_tokenizer

    tiny.build_tokenizer(tmp_path / "tok")
    other = tiny.build_from_config("llama", tmp_path / "other", tmp_path / "tok", hidden_size=64,
                                   intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=512)
    gguf_file = convert(other, tmp_path / "other.gguf", "f16", pre_tokenizer(other), "other")
    r = cli_here("train", "--method", "distill", "--model", "arith-base", "--teacher", gguf_file, "--dataset",
                 "arith", "--local-only", "--max-steps", "1", "--output-dir", tmp_path / "runs", cwd=tmp_path)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2 and "Traceback" not in said, said
    assert "other.gguf' tokenizes the data another way than the student '" in said and "arith-base' (from token" in said
    assert not (tmp_path / "runs").exists()
