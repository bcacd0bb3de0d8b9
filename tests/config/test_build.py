"""The one config: layering, auto values from LoRA Without Regret, and validation messages."""

import pytest

from app.config.build import build_config
from app.config.keys import parse_set
from app.config.resolve import effective_batch, resolve, warnings_for
from app.config.schema import AppConfig
from app.errors import UserError


def test_layers_apply_in_order():
    preset = {"method": "sft", "lora": {"r": 64}, "training": {"save_steps": 10}}
    cfg = build_config(preset, {"lora": {"r": None}, "training": {"save_steps": 20}}, ["r=8"])
    assert cfg.method == "sft"
    assert cfg.lora.r == 8  # --set beats the flag, which beats the preset; None flags are "unset"
    assert cfg.training.save_steps == 20


def test_set_parses_yaml_values_and_dotted_keys():
    assert parse_set(["training.save_steps=5", "learning_rate=1e-4", "report_to=[trackio]"]) == {
        "training": {"save_steps": 5, "learning_rate": 1e-4},
        "runtime": {"report_to": ["trackio"]},
    }


@pytest.mark.parametrize("item, needle", [
    ("lora.rank=4", "did you mean 'lora.r'"),
    ("save_step=4", "did you mean 'training.save_steps'"),
    ("nonsense", "key=value"),
])
def test_set_errors_suggest(item, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        parse_set([item])


@pytest.mark.parametrize("sets, needle", [
    (["r=0"], "lora.r"), (["learning_rate=0"], "training.learning_rate"),
    (["num_generations=1"], "grpo.num_generations"), (["method=ppo"], "method"),
    (["per_device_train_batch_size=3", "gradient_accumulation_steps=1"],
     "3 completions (per_device_train_batch_size x gradient_accumulation_steps) is not a multiple of grpo.num_gen"),
    (["per_device_train_batch_size=4", "gradient_accumulation_steps=1", "grpo.generation_batch_size=6"],
     "6 completions (grpo.generation_batch_size) is not a multiple of grpo.num_generations"),
    (["reward.weights={lenght: 1}"], "did you mean 'length'"),
    (["max_steps=0"], "0 steps trains nothing; pass a number of steps >= 1, or -1"),
])
def test_invalid_values_are_one_line_errors(sets, needle):
    with pytest.raises(UserError) as e:
        build_config(sets=sets)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_section_key_in_preset():
    with pytest.raises(UserError, match="did you mean 'training.learning_rate'"):
        build_config({"training": {"learning_rat": 1e-4}})


def test_resolve_follows_lora_without_regret():
    grpo = resolve(AppConfig(method="grpo"))
    assert grpo.lora.r == 16 and grpo.lora.target_modules == "all-linear"
    assert 1e-5 <= grpo.training.learning_rate <= 5e-5
    assert grpo.model.name_or_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert "Final answer" in grpo.data.system_prompt
    sft_small, sft_big = resolve(AppConfig(method="sft"), 500), resolve(AppConfig(method="sft"), 500_000)
    assert sft_small.lora.r < sft_big.lora.r == 256
    assert sft_small.training.learning_rate == pytest.approx(2e-4)
    assert effective_batch(grpo) < 32 and effective_batch(sft_big) < 32


def test_warns_on_large_effective_batch():
    cfg = resolve(build_config(sets=["method=sft", "per_device_train_batch_size=8", "gradient_accumulation_steps=8"]))
    assert any("effective batch 64 examples" in w for w in warnings_for(cfg))
    # GRPO counts prompts: 64 completions in groups of 4 are 16 prompts (fine), 128 are 32 (too many).
    grpo = ["per_device_train_batch_size=8", "num_generations=4"]
    assert not warnings_for(resolve(build_config(sets=grpo + ["gradient_accumulation_steps=8"])))
    assert any("effective batch 32 prompts" in w
               for w in warnings_for(resolve(build_config(sets=grpo + ["gradient_accumulation_steps=16"]))))
    assert not warnings_for(resolve(AppConfig()))


@pytest.mark.parametrize("step, accumulation, warned", [(32, 1, False), (4, 4, False), (16, 8, False), (2, 16, True),
                                                        (4, 2, True), (32, 8, True)])
def test_kto_batches_are_checked_against_trls_kto_guide(step, accumulation, warned):
    """KTO needs the batch LoRA Without Regret's "under 32" would forbid (its KL term is estimated within a step's
    batch): its own range, per step at least 4, 16-128 in all, and no effective-batch warning of the other kind
    (the KTO demo's 32 warned about its own preset)."""
    got = warnings_for(resolve(build_config(sets=["method=kto", f"per_device_train_batch_size={step}",
                                                  f"gradient_accumulation_steps={accumulation}"])))
    assert bool([w for w in got if "TRL's KTO guide asks at least 4 per step and 16-128" in w]) is warned, got
    assert not [w for w in got if "LoRA tolerates large batches" in w]


def test_yaml_round_trip():
    cfg = resolve(AppConfig(method="grpo"))
    import yaml

    assert AppConfig.model_validate(yaml.safe_load(cfg.to_yaml())) == cfg


def test_one_reward_weight_override_keeps_the_others():
    preset = {"reward": {"weights": {"format": 0.9, "length": 0.1}}}
    w = build_config(preset, sets=["reward.weights.boilerplate=2"]).reward.weights
    assert w == {"length": 0.1, "format": 0.9, "reference": 2.0, "boilerplate": 2.0}


def test_effective_batch_warning_counts_every_process():
    from app.config.resolve import resolve, warnings_for

    sets = ["per_device_train_batch_size=8", "gradient_accumulation_steps=4", "num_generations=8"]
    assert not [w for w in warnings_for(resolve(build_config(sets=sets))) if "effective batch" in w]  # 4 prompts
    warned = [w for w in warnings_for(resolve(build_config(sets=sets + ["runtime.num_processes=8"])))
              if "effective batch 32 prompts" in w]
    assert warned


@pytest.mark.parametrize("value, want", [
    ("all-linear", "all-linear"), ("q_proj", ["q_proj"]), ("q_proj,v_proj", ["q_proj", "v_proj"]),
    (" q_proj , self_attn.v_proj ", ["q_proj", "self_attn.v_proj"]), (r".*\.(q|v)_proj", r".*\.(q|v)_proj"),
    (["q_proj"], ["q_proj"]),
])
def test_lora_target_names_become_a_list_and_a_regex_stays(value, want):
    """PEFT reads a string as a regex over the WHOLE module name: 'q_proj' alone would match no layer."""
    from app.config.schema import LoraConfig

    assert LoraConfig(target_modules=value).target_modules == want


def test_grpo_loss_variants_are_checked_config():
    """A bad grpo.loss_type is one line naming TRL's losses, at validation (before anything loads); GSPO, DAPO's
    clip-higher and the rest reach TRL's GRPOConfig as set."""
    import dataclasses
    import re

    import trl

    from app.config.schema import LOSS_TYPES
    from app.errors import UserError
    from app.train.methods.args import grpo_kwargs

    with pytest.raises(UserError, match="unknown GRPO loss 'bogus'; TRL's losses: dapo, grpo, dr_grpo"):
        build_config(sets=["grpo.loss_type=bogus"])
    # the names TRL documents for the installed version are exactly ours
    help_text = next(f for f in dataclasses.fields(trl.GRPOConfig) if f.name == "loss_type").metadata["help"]
    documented = re.findall(r"'(\w+)'", help_text.split("Supported values are", 1)[1].split(".", 1)[0])
    assert sorted(documented) == sorted(LOSS_TYPES)
    from conftest import plan_for

    cfg = build_config(sets=["grpo.loss_type=dr_grpo", "grpo.importance_sampling_level=sequence",
                             "grpo.scale_rewards=none", "grpo.mask_truncated_completions=true",
                             "grpo.epsilon_high=0.28", "runtime.device=cpu"])
    kw = grpo_kwargs(plan_for(cfg), "/tmp/r", [1.0])
    args = trl.GRPOConfig(**kw)
    assert (args.loss_type, args.importance_sampling_level, args.scale_rewards, args.mask_truncated_completions,
            args.epsilon, args.epsilon_high) == ("dr_grpo", "sequence", "none", True, 0.2, 0.28)
    with pytest.raises(UserError, match="grpo.importance_sampling_level"):
        build_config(sets=["grpo.importance_sampling_level=tokens"])


def test_a_bare_key_two_sections_share_is_the_methods_own():
    from app.config.build import build_config

    assert build_config(sets=["beta=0.04"]).grpo.beta == 0.04  # grpo is the default method
    dpo = build_config({"method": "dpo"}, sets=["beta=0.3"])
    assert (dpo.dpo.beta, dpo.grpo.beta) == (0.3, build_config().grpo.beta)
    assert build_config(sets=["method=orpo", "beta=0.2"]).dpo.beta == 0.2
    with pytest.raises(UserError, match="ambiguous"):
        build_config({"method": "sft"}, sets=["beta=0.3"])
