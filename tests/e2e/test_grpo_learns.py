"""GRPO's update really moves the policy toward higher reward: a few real 4-bit GRPO steps on the shipped arith
base model (a tiny random model's next-token distribution is nearly uniform, so a few steps cannot move it) with a
reward it can learn quickly (shorter answers), then the expected reward of sampled completions is measured with
and without the adapter on the same prompts and the same sampling seed.

A broken update (advantages with the wrong sign, LoRA weights that do not train, a reward that never reaches the
loss) leaves the two equal or makes the adapter worse, so this fails."""

import pytest

from app.run import layout, store

pytestmark = pytest.mark.slow

REWARD = '''
def brevity(completions, **kwargs):
    return [-len(c[-1]["content"] if isinstance(c, list) else c) / 100 for c in completions]
'''


def _sampled_reward(run_dir, prompts, seed=0):
    """Mean brevity reward of 8 sampled completions per prompt, adapter off vs on (same seed, same prompts)."""
    from app.config.build import load_yaml_file, validate
    from app.model.generation import format_prompt, generate
    from app.model.pair import find_target, load_pair

    pair = load_pair(find_target(run_dir), True, device="cpu")
    model, tok = pair.model, pair.tok
    cfg = validate(load_yaml_file(run_dir / layout.CONFIG))
    texts = [format_prompt(tok, {"messages": [{"role": "system", "content": cfg.data.system_prompt},
                                              {"role": "user", "content": p}]}) for p in prompts] * 8
    kw = dict(max_new_tokens=40, temperature=1.0, batch_size=64, seed=seed)

    def share(outs):
        return sum(-len(o["text"]) / 100 for o in outs) / len(outs)

    with model.disable_adapter():
        before = share(generate(model, tok, texts, **kw))
    after = share(generate(model, tok, texts, **kw))
    return before, after


def test_grpo_raises_the_expected_reward(math_jsonl, tmp_path):
    import json

    from app.config.build import build_config
    from app.demo.recipe import base_model_path
    from app.train.running.session import Session

    reward_file = tmp_path / "brevity.py"
    reward_file.write_text(REWARD)
    entry = f"{reward_file}:brevity"
    cfg = build_config(
        {"method": "grpo", "model": {"name_or_path": str(base_model_path()), "compute_dtype": "fp32"},
         "data": {"dataset": str(math_jsonl)},
         "output_dir": str(tmp_path / "runs"), "run_name": "learns",
         "reward": {"custom": [entry], "weights": {"length": 0, "format": 0, "reference": 0, "boilerplate": 0,
                                                  entry: 1.0}}},
        sets=["max_steps=12", "learning_rate=1e-3", "per_device_train_batch_size=32", "gradient_accumulation_steps=1",
              "num_generations=8", "max_completion_length=40", "gradient_checkpointing=false", "local_only=true",
              "runtime.device=cpu", "logging_steps=1", "training.seed=0"])
    d = Session(cfg, progress=False).run()
    assert store.read_status(d)["status"] == layout.FINISHED
    prompts = [json.loads(line)["question"] for line in math_jsonl.read_text().splitlines()[:32]]
    before, after = _sampled_reward(d, prompts)
    assert after > before + 0.05, (before, after)  # at least 5 characters shorter on average
