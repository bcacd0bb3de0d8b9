"""Sequences stay inside the model's context, and architectures without sdpa still load on auto.

Found with models other than the Llama/Qwen fixtures: a GPT-2 with a 128-position table crashed GRPO and compare
with an IndexError on GSM8K-length prompts; Gemma 2 (no sdpa in transformers 5) could not load on auto.
"""

import json
from pathlib import Path

import pytest

from app.errors import UserError
from app.run import layout, store


@pytest.fixture(scope="module")
def odd_models(tmp_path_factory) -> dict[str, Path]:
    import tiny

    root = tmp_path_factory.mktemp("odd-models")
    tiny.build_tokenizer(root / "tok")
    small = dict(num_hidden_layers=2, num_attention_heads=4)
    return {
        "gpt2": tiny.build_from_config("gpt2", root / "gpt2", root / "tok", n_embd=64, n_layer=2, n_head=4,
                                       n_positions=128),
        "gemma2": tiny.build_from_config("gemma2", root / "gemma2", root / "tok", hidden_size=64,
                                         intermediate_size=128, num_key_value_heads=2, head_dim=16,
                                         max_position_embeddings=512, **small),
        "opt": tiny.build_from_config("opt", root / "opt", root / "tok", hidden_size=64, ffn_dim=128,
                                      word_embed_proj_dim=64, max_position_embeddings=512, **small),
    }


@pytest.fixture()
def long_jsonl(tmp_path) -> Path:
    """GSM8K-shaped rows; every third question is far longer than 128 tokens of the tiny tokenizer."""
    p = tmp_path / "long.jsonl"
    with p.open("w") as f:
        for i in range(24):
            a, b = i % 9 + 1, i % 7 + 2
            pad = " The quick brown fox jumps over the lazy dog." * 12 if i % 3 == 0 else ""
            f.write(json.dumps({"question": f"Tom has {a} apples and buys {b} more.{pad} How many apples?",
                                "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n")
    return p


def test_context_length_reads_each_config_family():
    from transformers import AutoConfig

    from app.model.placement import context_length

    assert context_length(AutoConfig.for_model("gpt2", n_positions=300)) == 300
    assert context_length(AutoConfig.for_model("llama", max_position_embeddings=4096)) == 4096
    assert context_length(AutoConfig.for_model("bloom")) is None  # ALiBi: no position table, no stated limit


def _prompts_ds(tok, prompts):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": prompts, "reference": ["1"] * len(prompts)})


@pytest.mark.parametrize("chat", [True, False])
def test_grpo_drops_prompts_that_leave_no_room_for_the_completion(tiny_model, chat):
    from transformers import AutoTokenizer

    from app.train.planning.context import _count, _rendered, fit_grpo_prompts

    def prompt_tokens(tok, prompt) -> int:
        return _count(tok, *_rendered(tok, prompt))

    tok = AutoTokenizer.from_pretrained(tiny_model)
    short, long = "Tom has 3 apples.", "Tom has 3 apples. " * 40
    wrap = (lambda t: [{"role": "user", "content": t}]) if chat else (lambda t: t)
    ds = _prompts_ds(tok, [wrap(short), wrap(long), wrap(short)])
    lengths = [prompt_tokens(tok, p) for p in ds["prompt"]]
    context, completion = lengths[1] + 10, 12  # room = lengths[1] - 2: only the long prompt is over
    said = []
    out = fit_grpo_prompts(ds, tok, context, completion, note=said.append)
    assert len(out) == 2 and all(prompt_tokens(tok, p) <= context - completion for p in out["prompt"])
    assert "dropped 1 of 3 rows" in said[0] and f"{context}-token context" in said[0]
    # exactly at the limit is kept
    assert len(fit_grpo_prompts(ds, tok, lengths[1] + completion, completion, note=said.append)) == 3
    with pytest.raises(UserError, match="every prompt is longer"):
        fit_grpo_prompts(ds, tok, lengths[0] - 1 + completion, completion, note=said.append)


def test_a_completion_length_that_fills_the_context_is_halved(tiny_model):
    from transformers import AutoTokenizer

    from app.config.build import build_config
    from app.train.planning.context import fit_grpo

    tok = AutoTokenizer.from_pretrained(tiny_model)
    ds = _prompts_ds(tok, ["Tom has 3 apples."] * 3)
    cfg = build_config({"method": "grpo"}, {}, ["grpo.max_completion_length=256"])
    said = []
    changes, out = fit_grpo(cfg, ds, tok, 256, note=said.append)
    assert changes == {"grpo.max_completion_length": 128} and cfg.grpo.max_completion_length == 256 and len(out) == 3
    assert "using 128" in said[0] and "below 256" in said[0]
    assert fit_grpo(cfg, ds, tok, 1024, note=said.append) == ({}, ds) and len(said) == 1
    assert fit_grpo(cfg, ds, tok, None) == ({}, ds)  # a config without a context: nothing to do


def test_sft_max_length_is_cut_to_the_context():
    from app.config.build import build_config
    from app.train.planning.context import fit_sft_length

    cfg = build_config({"method": "sft"}, {}, ["training.max_length=1024"])
    said = []
    assert fit_sft_length(cfg, 256, note=said.append) == {"training.max_length": 256}
    assert cfg.training.max_length == 1024 and "256-token" in said[0]
    assert fit_sft_length(cfg, 4096) == {} and fit_sft_length(cfg, None) == {}


def test_auto_attention_falls_back_for_an_architecture_without_sdpa(odd_models):
    from app.config.schema import ModelConfig
    from app.model.load import load_base_model

    model, _, info = load_base_model(ModelConfig(name_or_path=str(odd_models["gemma2"])), device="cpu")
    assert info["attention"] == "eager"
    with pytest.raises(UserError, match="does not support model.attn_implementation=sdpa; set it to auto or eager"):
        load_base_model(ModelConfig(name_or_path=str(odd_models["gemma2"]), attn_implementation="sdpa"),
                        device="cpu")


@pytest.mark.slow
def test_short_context_model_trains_grpo_and_sft_and_compares_long_prompts(odd_models, long_jsonl, tmp_path):
    """GPT-2 with 128 positions on prompts longer than that: GRPO drops them, SFT cuts at 128, compare keeps the
    prompts' ends. Without the fitting each of the three ends in an IndexError inside the position embedding."""
    from app.config.build import build_config
    from app.eval.compare import run_comparison
    from app.train.running.session import Session

    for method in ("grpo", "sft"):
        cfg = build_config(
            {"method": method, "model": {"name_or_path": str(odd_models["gpt2"])},
             "data": {"dataset": str(long_jsonl), "heldout_size": 6}, "output_dir": str(tmp_path / "runs"),
             "run_name": method},
            {"training": {"max_steps": 2}},
            ["max_completion_length=16", "per_device_train_batch_size=4", "gradient_accumulation_steps=1",
             "num_generations=4", "gradient_checkpointing=false", "runtime.device=cpu", "training.max_length=512"])
        d = Session(cfg, progress=False).run()
        assert store.read_status(d)["status"] == layout.FINISHED
        log = (d / layout.LOG).read_text()
        if method == "grpo":
            assert "rows whose prompt is longer than the 112 tokens left of the model's 128-token context" in log
        else:
            assert "examples are cut at 128 tokens" in log
    result = run_comparison(d, num_samples=6, max_new_tokens=16)
    assert result.config["prompts_cut"] >= 1
    assert all(r.base.text is not None and r.adapter.text is not None for r in result.rows)
    with pytest.raises(UserError, match="--max-new-tokens 128 fills the model's whole 128-token context"):
        run_comparison(d, num_samples=2, max_new_tokens=128)


def test_a_base_left_unquantized_is_reported_as_such(tiny_model):
    from app.config.schema import ModelConfig
    from app.model.load import load_base_model

    _, _, info = load_base_model(ModelConfig(name_or_path=str(tiny_model)), device="cpu")
    assert info["4bit"] is True
    _, _, info = load_base_model(ModelConfig(name_or_path=str(tiny_model), load_in_4bit=False), device="cpu")
    assert info["4bit"] is False


@pytest.mark.slow
def test_the_run_says_when_transformers_quantized_nothing(tiny_model, math_jsonl, tmp_path, monkeypatch):
    """Falcon in transformers 5.23 loads with no 4-bit layer at all, behind a line about 'eetq'; the run says it."""
    import app.model.load
    from app.config.build import build_config
    from app.train.running.session import Session

    monkeypatch.setattr(app.model.load, "_has_4bit_layers", lambda model: False)
    cfg = build_config({"method": "sft", "model": {"name_or_path": str(tiny_model)},
                        "data": {"dataset": str(math_jsonl)}, "output_dir": str(tmp_path)},
                       {"training": {"max_steps": 1}}, ["runtime.device=cpu", "gradient_checkpointing=false"])
    log = (Session(cfg, progress=False).run() / layout.LOG).read_text()
    assert "quantized none of the layers" in log and "4-bit=False" in log


@pytest.mark.slow
def test_lora_targets_that_match_no_layer_name_the_layers_there_are(odd_models, long_jsonl, tmp_path):
    """GPT-2 names its layers c_attn / c_fc / c_proj: Llama's q_proj,v_proj match nothing there (before: PEFT's
    traceback)."""
    from app.config.build import build_config
    from app.train.running.session import Session

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(odd_models["gpt2"])},
                        "data": {"dataset": str(long_jsonl)}, "output_dir": str(tmp_path)},
                       {"training": {"max_steps": 1}}, ["lora.target_modules=q_proj,v_proj", "runtime.device=cpu"])
    with pytest.raises(UserError, match=r"matches no layer of this model; its linear layers are: c_attn, c_fc, "
                                        r"c_proj \(or use all-linear\)"):
        Session(cfg, progress=False).run()


def test_packing_is_measured_on_the_loaded_model(odd_models, tiny_models):
    """Packing relies on the model keeping packed examples apart; OPT (positions from the attention mask) does not,
    Llama / Qwen / Gemma 2 / GPT-2 do. Measured on the real 4-bit models, as a run measures it."""
    from app.config.schema import ModelConfig
    from app.model.load import load_base_model, packed_examples_stay_apart

    for path, apart in ((tiny_models["llama"], True), (tiny_models["qwen3"], True), (odd_models["gpt2"], True),
                        (odd_models["gemma2"], True), (odd_models["opt"], False)):
        model, _, _ = load_base_model(ModelConfig(name_or_path=str(path)), device="cpu")
        modes = [m.training for m in model.modules()]
        assert packed_examples_stay_apart(model) is apart, path.name
        assert [m.training for m in model.modules()] == modes  # the probe leaves the model as it found it


@pytest.mark.slow
def test_a_model_that_mixes_packed_examples_trains_sft_unpacked(odd_models, long_jsonl, tmp_path):
    """OPT: auto packing turns off with one line and the run trains (the probe must not leave bitsandbytes' CPU
    repacking behind: a 4-bit layer with a bias then failed in backward); packing forced on is refused."""
    from app.config.build import build_config
    from app.run import layout, store
    from app.train.running.session import Session

    def cfg(*sets):
        return build_config({"method": "sft", "model": {"name_or_path": str(odd_models["opt"])},
                             "data": {"dataset": str(long_jsonl)}, "output_dir": str(tmp_path)},
                            {"training": {"max_steps": 2}}, ["runtime.device=cpu", "training.max_length=256", *sets])

    d = Session(cfg(), progress=False).run()
    assert store.read_status(d)["status"] == layout.FINISHED
    assert "packing is off: OPTForCausalLM lets packed examples attend to each other" in (d / layout.LOG).read_text()
    with pytest.raises(UserError, match="packing=true: with this architecture \\(measured"):
        Session(cfg("training.packing=true"), progress=False).run()
