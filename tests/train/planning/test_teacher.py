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
