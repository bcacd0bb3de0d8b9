"""app/model/family.py: a model's class and chat template as the installed libraries know them, read before anything
loads; a family with no class a run can train, or no chat template, said in one line (tests/e2e/test_families.py
takes each 2026 family through every step)."""

import json

import pytest
from conftest import cli_here

from app.errors import UserError


def test_the_class_a_run_opens_each_family_with():
    from app.model.family import model_class

    assert model_class({"model_type": "qwen3"}, "m") == "Qwen3ForCausalLM"
    assert model_class({"model_type": "gemma4_text"}, "m") == "Gemma4ForCausalLM"
    assert model_class({"model_type": "gemma3"}, "m", images=True) == "Gemma3ForConditionalGeneration"
    assert model_class({"model_type": "qwen9"}, "m") is None  # unknown here: the loader's own line says so
    remote = {"model_type": "qwen9", "auto_map": {"AutoModelForCausalLM": "modeling_q.Qwen9ForCausalLM"}}
    assert model_class(remote, "m", trust_remote_code=True) == "Qwen9ForCausalLM"


@pytest.mark.parametrize("config,images,words", [
    ({"model_type": "vit", "architectures": ["ViTForImageClassification"]}, False,
     r"is a vit model \(ViTForImageClassification\): transformers .* no AutoModelForCausalLM class"),
    ({"model_type": "qwen3"}, True, r"no AutoModelForImageTextToText class for it, so it cannot read pictures; "
                                    r"train it on text \(--set model.images=false\)"),
    ({"model_type": "t5"}, False, r"is a t5 model \(t5\): .*pick a text-generation model"),
    ({"model_type": "qwen2_5_vl"}, False, r"no AutoModelForCausalLM class for it, it is a vision-language model: "
                                          r"train it on data with images .*--set model.images=true$"),
])
def test_a_family_without_a_class_a_run_trains_is_one_line(config, images, words):
    from app.model.family import model_class

    with pytest.raises(UserError, match=words) as e:
        model_class(config, "some/model", images=images)
    assert "\n" not in str(e.value)


def _tok(template):
    from types import SimpleNamespace

    return SimpleNamespace(chat_template=template)


def test_the_template_is_named_when_trl_ships_it():
    from app.model.templates import shipped_template_name, template_file

    qwen3 = template_file("qwen3").read_text()
    assert shipped_template_name(qwen3) == "qwen3" and shipped_template_name(qwen3 + "\n") == "qwen3"
    assert shipped_template_name("{{ messages }}") is None


def test_the_family_line_says_what_trl_does_with_the_template(tiny_models):
    from transformers import AutoTokenizer

    from app.model.family import read_family
    from app.model.templates import template_file

    tok = AutoTokenizer.from_pretrained(tiny_models["qwen3"])
    config = json.loads((tiny_models["qwen3"] / "config.json").read_text())
    own = read_family(config, tok, "m")
    assert (own.model_class, own.template, own.has_template) == ("Qwen3ForCausalLM", None, True)
    assert not own.tool_calls and "chat template: its own (TRL cannot read its tool calls" in own.line()
    tok.chat_template = template_file("qwen3").read_text()
    trl = read_family(config, tok, "m")
    assert trl.template == "qwen3" and trl.tool_calls and trl.turn_masks
    assert "TRL's qwen3 (TRL reads its tool calls, masks every assistant turn)" in trl.line()
    tok.chat_template = None
    none = read_family(config, tok, "m")
    assert not none.has_template and "no chat template: prompts and conversations are written as plain" in none.line()
    assert read_family(None, tok, "m") is None and read_family(config, None, "m") is None


def test_train_refuses_a_model_with_no_causal_lm_class_before_anything_loads(tmp_path, math_jsonl):
    from transformers import AutoConfig, AutoModel

    model = tmp_path / "vit"
    config = AutoConfig.for_model("vit", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=16, image_size=8, patch_size=4)
    AutoModel.from_config(config).save_pretrained(model)
    out = tmp_path / "runs"
    for extra in (["--dry-run"], ["--output-dir", str(out)]):
        r = cli_here("train", "--model", model, "--dataset", math_jsonl, "--method", "sft", *extra)
        assert r.returncode == 2, r.stderr[-2000:]
        said = " ".join(r.stderr.split())  # the dry run's console wraps long lines
        assert "is a vit model" in said and "no AutoModelForCausalLM class" in said
        assert "Traceback" not in r.stderr + r.stdout
    assert not out.exists()  # no run folder


def test_a_model_without_a_chat_template_is_said_in_the_plan(tiny_models, tmp_path, math_jsonl):
    import shutil

    from app.config.build import build_config
    from app.train.planning.plan import make_plan

    bare = tmp_path / "bare"
    shutil.copytree(tiny_models["qwen3"], bare)
    cfg_file = bare / "tokenizer_config.json"
    cfg_file.write_text(json.dumps({k: v for k, v in json.loads(cfg_file.read_text()).items() if k != "chat_template"}))
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    said = []
    cfg = build_config({"method": "sft", "model": {"name_or_path": str(bare)}, "data": {"dataset": str(math_jsonl)}},
                       {}, ["runtime.device=cpu"])
    plan = make_plan(cfg, note=said.append, offline=True)
    assert plan.family is not None and not plan.family.has_template
    assert sum("no chat template: prompts and conversations are written as plain" in s for s in said) == 1
    assert plan.status_fields()["family"]["model_class"] == "Qwen3ForCausalLM"
