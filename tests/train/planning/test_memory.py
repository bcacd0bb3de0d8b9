"""The memory-fit estimate: parameter counts, the terms that must grow with the config, and verdicts per card."""

import json

import pytest

from app.config.build import build_config
from app.config.presets import load_preset
from app.config.resolve import resolve
from app.errors import UserError
from app.model.shape import model_shape, params_from_name
from app.train.planning.memory import Decisions, estimate_memory, fit_problem, format_estimate

QWEN_1_5B = {  # the real Qwen2.5-1.5B-Instruct shape
    "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
    "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
}


def _est(model: str, method: str = "grpo", sets=()):
    return estimate_memory(resolve(build_config({"method": method, "model": {"name_or_path": model}}, None,
                                                list(sets))))


@pytest.mark.parametrize("name,expected", [
    ("Qwen/Qwen2.5-1.5B-Instruct", 1_500_000_000),
    ("Qwen/Qwen2.5-7B", 7_000_000_000),
    ("meta-llama/Llama-3.1-8B-Instruct", 8_000_000_000),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", 360_000_000),
    ("Qwen/Qwen3-0.6B", 600_000_000),
    ("gpt2", None),
])
def test_params_from_name(name, expected):
    assert params_from_name(name) == expected


def test_param_count_from_local_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN_1_5B))
    shape, params, source = model_shape(str(tmp_path))
    assert source == "config.json"
    assert shape["hidden"] == 1536 and shape["kv_heads"] == 2 and shape["tied"]
    assert abs(params - 1.54e9) / 1.54e9 < 0.02  # published size: 1.54B


def test_1_5b_grpo_fits_8gb_and_7b_does_not():
    small = estimate_memory(resolve(build_config(load_preset("gpu-8gb"))))
    assert small["verdicts"][8] == "fits", small
    # about 1.2 GB of 4-bit weights for 1.5B params (NF4 0.5 byte + constants, embeddings in 16-bit)
    assert 0.9 < small["weights_gb"] < 1.4
    big = _est("Qwen/Qwen2.5-7B-Instruct")
    assert big["verdicts"][8] != "fits" and big["verdicts"][24] == "fits"
    assert big["total_gb"] > small["total_gb"] + 3


def test_terms_grow_with_the_config():
    base = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft", ["training.per_device_train_batch_size=1"])
    more_batch = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft", ["training.per_device_train_batch_size=4"])
    assert more_batch["activations_gb"] > 3 * base["activations_gb"]
    no_ckpt = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft",
                   ["training.per_device_train_batch_size=1", "gradient_checkpointing=false"])
    assert no_ckpt["activations_gb"] > base["activations_gb"]
    high_rank = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft", ["training.per_device_train_batch_size=1", "lora.r=256"])
    # resolve() picks r=64 for SFT when the row count is unknown; LoRA memory is linear in r
    assert high_rank["lora_gb"] == pytest.approx(base["lora_gb"] * 256 / 64, rel=1e-6)
    fp16 = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft",
                ["training.per_device_train_batch_size=1", "model.load_in_4bit=false"])
    assert fp16["weights_gb"] > 2.5 * base["weights_gb"]
    gens = _est("Qwen/Qwen2.5-1.5B-Instruct", "grpo", ["num_generations=16", "per_device_train_batch_size=16"])
    assert gens["generation_gb"] > _est("Qwen/Qwen2.5-1.5B-Instruct", "grpo")["generation_gb"]


def test_unknown_model_size_says_so():
    est = _est("gpt2")
    assert est["total_gb"] is None and set(est["verdicts"].values()) == {"unknown"}
    assert "size unknown" in format_estimate(est)


def test_tiny_local_model_is_tiny(tiny_model):
    est = _est(str(tiny_model), "grpo", ["max_completion_length=16"])
    assert est["params_source"] == "config.json" and est["params"] < 1_000_000
    assert est["total_gb"] < 1.0 and all(v == "fits" for v in est["verdicts"].values())
    assert "8 GB" in format_estimate(est)


def test_real_token_lengths_replace_max_length():
    cfg = resolve(build_config({"method": "sft", "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"}},
                               None, ["training.per_device_train_batch_size=4", "training.packing=false"]))
    worst = estimate_memory(cfg)  # lengths unknown: every row as long as max_length
    short = estimate_memory(cfg, lengths=[200 + i % 50 for i in range(1000)])
    assert worst["tokens_per_batch"] == 4 * 1024 and short["tokens_per_batch"] == 4 * 247
    assert short["activations_gb"] < worst["activations_gb"] / 3
    packed = estimate_memory(cfg, lengths=[200 + i % 50 for i in range(1000)], decisions=Decisions(packing=True))
    assert packed["tokens_per_batch"] == 4 * 1024  # packed rows are full
    # the fused LM head: the vocabulary never multiplies the whole batch (152k vocab x 4096 tokens x fp32 = 2.3 GB)
    assert worst["activations_gb"] < 2.5  # the whole logits alone would be 4.6 GB


def test_fit_refusal_names_the_numbers_and_the_knobs():
    cfg = resolve(build_config({"method": "grpo", "model": {"name_or_path": "Qwen/Qwen2.5-7B-Instruct"}}))
    est = estimate_memory(cfg)
    msg = fit_problem(est, cfg, gpu_gb=6.0)
    assert msg.startswith(f"the memory estimate is {est['total_gb']:.1f} GB and this GPU has 6 GB")
    for knob in ("per_device_train_batch_size=2", "max_completion_length=128", "num_generations=2",
                 "--no-fit-check"):
        assert knob in msg
    assert fit_problem(est, cfg, gpu_gb=80.0) is None and fit_problem(est, cfg, gpu_gb=None) is None
    sft = resolve(build_config({"method": "sft", "model": {"name_or_path": "Qwen/Qwen2.5-7B-Instruct"}}))
    assert "activation_offloading=true" in fit_problem(estimate_memory(sft), sft, gpu_gb=6.0)


@pytest.mark.slow
def test_exact_parts_match_real_tensors(tmp_path):
    """The estimate's exact terms against a real 4-bit model on CPU: 4-bit weight bytes (packed weights, absmax
    constants, dense embeddings), LoRA parameter count, and LoRA weight + gradient + AdamW state bytes after a real
    optimizer step, each within 5 %."""
    import tiny
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from app.config.schema import LoraConfig, ModelConfig
    from app.model.load import load_base_model
    from app.model.lora import attach_or_describe_lora
    from app.train.planning.memory import lora_bytes_per_param, lora_param_count, weight_bytes

    tok = tiny.build_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    c = AutoConfig.for_model("llama", vocab_size=len(tok), hidden_size=256, intermediate_size=704,
                             num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
                             tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    AutoModelForCausalLM.from_config(c).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    shape, params, _ = model_shape(str(tmp_path / "m"))

    model, _, _ = load_base_model(ModelConfig(name_or_path=str(tmp_path / "m"), compute_dtype="fp32"),
                                  local_only=True, device="cpu")
    real = 0
    for mod in model.modules():
        for t in list(mod.parameters(recurse=False)) + list(mod.buffers(recurse=False)):
            real += t.numel() * t.element_size()
        qs = getattr(getattr(mod, "weight", None), "quant_state", None)
        if qs is not None:
            real += qs.absmax.numel() * qs.absmax.element_size()
            if qs.state2 is not None:
                real += qs.state2.absmax.numel() * qs.state2.absmax.element_size()
    norms = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "norm" in n)
    assert weight_bytes(shape, params, True, True, dense_bytes=4) == pytest.approx(real - norms, rel=0.05)

    model, peft_config = attach_or_describe_lora(model, LoraConfig(r=8, alpha=16))
    if peft_config is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == lora_param_count(shape, 8, "all-linear")
    opt = torch.optim.AdamW(trainable, lr=1e-4)
    ids = torch.randint(5, len(tok), (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if t.dim() > 0)
    used = sum(p.numel() * p.element_size() + p.grad.numel() * p.grad.element_size() for p in trainable) + state
    assert used == pytest.approx(lora_param_count(shape, 8, "all-linear") * lora_bytes_per_param(cuda=False), rel=0.05)


def test_auto_generation_batch_shrinks_to_what_the_gpu_holds():
    """GRPO samples several optimizer steps' completions at once on auto; on a GPU without room for that, it
    samples as many steps' worth as fit instead of refusing the run. An explicit size is the user's: refused."""
    from app.train.planning.plan import decide_machine, make_plan

    gpu = {}

    def _on_a_gpu(_, gb: float) -> None:  # the card the plan is made for (train --dry-run --gpu-memory GB)
        gpu["gb"] = gb

    def preflight(c, note=None):
        return make_plan(c, note=note, offline=True, machine=decide_machine(c, card_gb=gpu["gb"]))

    cfg = resolve(build_config({"method": "grpo", "model": {"name_or_path": "Qwen/Qwen2.5-7B-Instruct"}},
                               {}, ["per_device_train_batch_size=2", "gradient_accumulation_steps=8",
                                    "num_generations=8", "max_completion_length=1024"]))
    one_step = cfg.model_copy(deep=True)
    one_step.grpo.generation_batch_size = 16
    plain = Decisions(sampler="plain")  # the fit is decided without the optional sampling copy
    full, least = (estimate_memory(c, decisions=plain)["total_gb"] for c in (cfg, one_step))
    assert full > least + 1.0  # the generation batch is a real part of this run's memory
    said = []
    _on_a_gpu(None, (full + least) / 2)
    plan = preflight(cfg, note=said.append)
    assert 16 <= plan.fast.completions_at_once < 64 and plan.estimate["total_gb"] <= (full + least) / 2
    assert f"sampling {plan.fast.completions_at_once} completions at a time" in said[0]
    # the run records the size it samples at, with the reason: config.yaml re-runs the same
    assert plan.cfg.grpo.generation_batch_size == plan.fast.completions_at_once
    assert [a.key for a in plan.adjustments] == ["grpo.generation_batch_size"]
    assert "completions at a time" in plan.adjustments[0].reason and "grpo.generation_batch_size" in plan.config_yaml()
    _on_a_gpu(None, full + 1)
    assert preflight(cfg).fast.completions_at_once == 64  # room enough: the auto size stands
    fixed = cfg.model_copy(deep=True)
    fixed.grpo.generation_batch_size = 64
    _on_a_gpu(None, (full + least) / 2)
    with pytest.raises(UserError, match="the memory estimate is"):
        preflight(fixed)
    _on_a_gpu(None, least - 0.5)
    with pytest.raises(UserError, match="the memory estimate is"):  # not even one step's worth fits
        preflight(cfg)


def test_older_config_names_give_a_shape(tmp_path):
    """GPT-2 / Falcon / OPT name hidden size and layers differently (n_embd, n_layer, ffn_dim): their size is
    known from config.json too, not 'model size unknown'."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                                      "n_head": 12, "n_inner": None, "vocab_size": 50257,
                                                      "tie_word_embeddings": True}))
    shape, params, _ = model_shape(str(tmp_path))
    assert (shape["hidden"], shape["layers"], shape["heads"], shape["intermediate"]) == (768, 12, 12, 3072)
    assert 0.11e9 < params < 0.14e9  # GPT-2 small: 124M


def test_the_per_token_layer_term_is_what_a_4bit_lora_layer_saves(tmp_path):
    """The training term's coefficients (bytes a decoder layer saves for backward, per token) re-measured: one 4-bit
    Qwen2 layer in bf16 with LoRA r16 on every linear layer, the tensors autograd saves counted by storage."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Qwen2Config, Qwen2ForCausalLM

    from app.train.planning.memory import SAVED_PER_HIDDEN, SAVED_PER_INTERMEDIATE

    h, inter, tokens = 512, 2816, 256
    cfg = Qwen2Config(vocab_size=512, hidden_size=h, intermediate_size=inter, num_hidden_layers=1,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024)
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(tmp_path)
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, quantization_config=q,
                                                 attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.bfloat16)  # as TRL keeps a 4-bit base's adapter
    inner = model.base_model.model.model
    x = torch.randn(1, tokens, h, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(tokens).unsqueeze(0)
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        inner.layers[0](x, position_embeddings=inner.rotary_emb(x, pos), attention_mask=None, position_ids=pos)
    per_token = sum(storages.values()) / tokens
    assert per_token == pytest.approx(SAVED_PER_HIDDEN * h + SAVED_PER_INTERMEDIATE * inter, rel=0.10)


def test_packing_is_judged_against_what_reading_another_example_does():
    """bf16 kernels of different shapes differ by a few percent of the logits; an example that reads another differs
    by about as much as the two simply joined. A fixed 2 % tolerance called the first 'mixing' (packing off on a
    GPU); the measurement compares the packed difference with the joined one instead."""
    import torch

    from app.model.load import packed_examples_stay_apart

    class Fake(torch.nn.Module):
        """A model whose packed row is the separate one plus ``noise`` (kernel rounding) or plus what reading the
        first example adds (``leaks``)."""

        def __init__(self, noise: float, leaks: bool):
            super().__init__()
            self.emb, self.noise, self.leaks = torch.nn.Embedding(50, 4), noise, leaks

        def get_input_embeddings(self):
            return self.emb

        def forward(self, input_ids, position_ids=None, use_cache=False):
            base = torch.sin(input_ids.float()).unsqueeze(-1).repeat(1, 1, 50) * 3
            reads_first = input_ids.shape[1] > 5 and (position_ids is None or self.leaks)
            logits = base + (torch.cumsum(base, 1) * 0.5 if reads_first else 0)
            if position_ids is not None and not self.leaks:
                logits = logits * (1 + self.noise)
            return type("Out", (), {"logits": logits})()

    assert packed_examples_stay_apart(Fake(noise=0.05, leaks=False))  # bf16 noise: still apart
    assert not packed_examples_stay_apart(Fake(noise=0.0, leaks=True))  # reads the other example
