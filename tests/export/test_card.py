"""app/export/card.py: how the card tells a reader to open what was exported, for text and vision-language runs."""

from app.export.card import _usage


def test_a_vision_run_is_opened_whole_and_its_gguf_with_the_projector():
    text = "\n".join(_usage("merged", {}, None, images=True))
    assert "AutoModelForImageTextToText" in text and "AutoProcessor" in text and "CausalLM" not in text
    adapter = "\n".join(_usage("adapter", {}, None, images=True))
    assert "PeftModel.from_pretrained(base" in adapter and "--image" in adapter and "AutoPeftModelForCausalLM" not in adapter
    files = {"gguf": "r-f16.gguf", "mmproj": "mmproj-r-f16.gguf", "modelfile": "Modelfile"}
    gguf = "\n".join(_usage("ollama", files, "r", images=True))
    assert "llama-mtmd-cli -m r-f16.gguf --mmproj mmproj-r-f16.gguf --image" in gguf
    assert "llama-server -m r-f16.gguf --mmproj mmproj-r-f16.gguf" in gguf and "ollama create r -f Modelfile" in gguf


def test_a_text_run_keeps_its_usage():
    assert "AutoModelForCausalLM" in "\n".join(_usage("merged", {}, None))
    assert "AutoPeftModelForCausalLM" in "\n".join(_usage("adapter", {}, None))
    assert "\n".join(_usage("gguf", {"gguf": "r.gguf"}, None)).count("llama-cli -m r.gguf -cnv") == 1


def test_a_moe_run_says_which_parameters_were_4bit():
    from app.export.card import experts_line

    seen = {"params": 175_488, "expert_params": 98_304, "experts": 8, "experts_4bit": False, "lora_on_experts": False,
            "lora_expert_targets": [], "router": {"num_experts_per_tok": 2}}
    line = experts_line(seen)
    assert "8 experts per MoE layer, 0.10M of 0.18M parameters" in line and "the experts 16-bit" in line
    assert "not the experts" in line and "num_experts_per_tok 2" in line
    quantized = experts_line({**seen, "experts_4bit": True, "lora_on_experts": True,
                              "lora_expert_targets": ["mlp.experts.down_proj"]})
    assert "the experts 4-bit (NF4, each quantized as it loaded)" in quantized
    assert "`mlp.experts.down_proj`" in quantized


def test_a_distilled_runs_card_names_its_local_teacher_without_its_path(tmp_path):
    """The card may be pushed: a teacher that is a local run or folder is named by its last part, as the base is,
    never by the user's directory layout (the proof's teacher line and the method line)."""
    from app.config.schema import AppConfig
    from app.export.card import method_lines, proof_table

    teacher = tmp_path / "secret-home" / "runs" / "my-grpo-run"
    teacher.mkdir(parents=True)
    cfg = AppConfig.model_validate({"method": "distill", "distill": {"teacher": str(teacher)},
                                    "data": {"dataset": "arith"}})
    side = {"accuracy": 0.5, "mean_reward": 1.0, "mean_tokens": 9.0}
    cmp = {"summary": {"n": 4, "wins": 2, "ties": 2, "losses": 0, "base": side, "adapter": side, "teacher": side,
                       "closed": 0.5},
           "config": {"teacher": f"run {teacher} (asked with its system prompt 'Be brief.')"}}
    text = "\n".join(proof_table(cmp) + method_lines(cfg))
    assert str(tmp_path) not in text and "secret-home" not in text
    assert "Teacher: run `my-grpo-run` (a local model folder) (asked with its system prompt 'Be brief.')" in text
    assert "from teacher `my-grpo-run` (a local model folder)" in text
