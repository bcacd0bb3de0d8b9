"""The merged sampler (its choice: tests/train/planning/test_fastpaths.py): that it samples from the policy being
trained (on CPU, where the dense copy is fp32 and nothing is compiled)."""

import pytest


def test_the_copy_counts_in_the_fit_check():
    from app.config.build import build_config
    from app.config.resolve import resolve
    from app.train.planning.memory import Decisions, estimate_memory

    cfg = resolve(build_config({"model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"}}))
    plain, merged, vllm = (estimate_memory(cfg, decisions=Decisions(sampler=s)) for s in ("plain", "merged", "vllm"))
    embed = 151936 * 1536  # Qwen2.5-1.5B's tied vocabulary: shared with the trainer by the merged copy
    assert merged["total_gb"] - plain["total_gb"] == pytest.approx((1.5e9 - embed) * 2 / 2**30, rel=0.01)
    assert vllm["total_gb"] - plain["total_gb"] == pytest.approx(1.5e9 * 2 / 2**30, rel=0.01)


def test_dequantize_reads_weights_bitsandbytes_repacked_for_the_cpu():
    """bitsandbytes repacks a 4-bit weight for its CPU kernel at the first no-grad eval forward (on CPUs with
    AVX512-BF16); the sampler must still read the same matrix, and must leave the layer as it found it."""

    import bitsandbytes as bnb
    import torch

    from app.train.methods.sampler import _dequantize

    torch.manual_seed(0)
    dense = torch.nn.Linear(256, 128, bias=False)
    q = bnb.nn.Linear4bit(256, 128, bias=False, compute_dtype=torch.float32, quant_type="nf4")
    q.weight = bnb.nn.Params4bit(dense.weight.data.clone(), requires_grad=False, quant_type="nf4").to("cpu")
    before = _dequantize(q.weight).float()
    assert (before - dense.weight).abs().mean() < 0.1 * dense.weight.abs().mean()  # NF4 of the same matrix
    q.eval()
    with torch.no_grad():
        q(torch.randn(2, 256))
    if not getattr(q.weight.quant_state, "packing_format_for_cpu", False):
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes did not repack")
    after = _dequantize(q.weight).float()
    assert torch.allclose(after, before, atol=0.02 * before.abs().max().item())
    assert q.weight.quant_state.packing_format_for_cpu  # the layer still holds its packed form


def _logprobs(model, ids, n_prompt):

    import torch

    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[:, n_prompt - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, n_prompt:, None]).squeeze(-1)


@pytest.mark.slow
@pytest.mark.parametrize("four_bit", [True, False])
def test_sampler_follows_the_policy_being_trained(tiny_model, math_jsonl, tmp_path, four_bit):
    """A real GRPO run (4-bit base + LoRA, CPU) sampling from the merged copy: the copy was refreshed for every
    optimizer step that sampled, and after training its log-probs of a completion match the trainer's own to 1e-3,
    while a copy left at the start would be off by far more: the refresh is what keeps sampling on-policy."""
    from dataclasses import replace

    import torch

    from app.config.build import build_config
    from app.data import build_splits, to_grpo
    from app.run.counts import RunCounts
    from app.train.methods.sampler import MergedSampler
    from app.train.planning.fastpaths import Env, decide
    from app.train.planning.plan import make_plan
    from app.train.running.build import build_trainer, load_model, run_rewards

    cfg = (build_config(
        {"model": {"name_or_path": str(tiny_model)}, "data": {"dataset": str(math_jsonl)}},
        None, ["training.max_steps=4", "per_device_train_batch_size=4", "gradient_accumulation_steps=1",
               "num_generations=4", "grpo.generation_batch_size=8", "max_completion_length=12",
               "learning_rate=5e-3", "gradient_checkpointing=false", "save_steps=100", "runtime.device=cpu",
               f"model.load_in_4bit={str(four_bit).lower()}"]))
    train, _, det = build_splits(cfg.data, 0)
    planned = make_plan(cfg, train, det)  # the copy fits on any machine with a quarter of its RAM free for it
    plan = replace(planned, fast=decide(planned.cfg, Env(cuda=False), copy_fits=True),
                   train_ds=to_grpo(train, det, planned.tokenizer, None))  # prompts without the system prompt
    assert plan.fast.sampler == "merged"
    loaded = load_model(plan)
    tok = loaded.tokenizer
    trainer = build_trainer(plan, loaded, tmp_path / "r", RunCounts(), run_rewards(plan, True, RunCounts()))
    sampler = trainer.merged_sampler
    assert isinstance(sampler, MergedSampler) and len(sampler.adapted) == 2 * 7  # every LoRA layer of 2 blocks
    base = trainer.model.get_base_model()  # embeddings and LM head are shared, not copied
    assert sampler.model.get_input_embeddings().weight is base.get_input_embeddings().weight
    assert sampler.model.lm_head.weight is base.lm_head.weight
    stale = MergedSampler(trainer.model, torch.float32)
    stale.sync(0)  # the policy before training
    trainer.train()
    # 4 optimizer steps, a generation batch of 8 = 2 steps' worth: sampled (and refreshed) before steps 1 and 3
    assert sampler.syncs == 2 and sampler.synced_step == 2

    sampler.sync(trainer.state.global_step)
    text = tok.apply_chat_template([{"role": "user", "content": "Tom has 3 apples and buys 4 more."}],
                                   add_generation_prompt=True, tokenize=False)
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    completion = sampler.generate([prompt], trainer.generation_config, tok.pad_token_id, [tok.eos_token_id])[0]
    assert completion, "the copy generated nothing"
    ids = torch.tensor([prompt + completion])
    trainer.model.eval()
    want = _logprobs(trainer.model, ids, len(prompt))
    got = _logprobs(sampler.model, ids, len(prompt))
    old = _logprobs(stale.model, ids, len(prompt))
    assert torch.allclose(got, want, atol=1e-3), (got - want).abs().max()
    assert (old - want).abs().max() > 20 * (got - want).abs().max().clamp(min=1e-5)


@pytest.mark.slow
def test_a_failing_fast_sampler_steps_down_and_the_run_goes_on(tiny_model, math_jsonl, tmp_path, monkeypatch, caplog):
    """The merged copy is the GPU default and its compiled path is not exercised on CPU: whatever it raises, the
    run steps down (compiled -> uncompiled copy -> TRL's own sampling), says so once per step, and finishes."""
    from app.config.build import build_config
    from app.train.methods import sampler as S
    from app.train.running.session import Session

    calls = {"n": 0}
    real = S.MergedSampler.generate

    def flaky(self, *a, **k):
        calls["n"] += 1
        if calls["n"] <= 2:  # the compiled try, then the uncompiled one
            raise RuntimeError("simulated compile failure")
        return real(self, *a, **k)

    monkeypatch.setattr(S.MergedSampler, "generate", flaky)
    real_init = S.MergedSampler.__init__

    def compiled(self, *a, **k):  # pretend CUDA: the copy starts with compile on
        real_init(self, *a, **k)
        self.compile = True

    monkeypatch.setattr(S.MergedSampler, "__init__", compiled)
    cfg = build_config({"model": {"name_or_path": str(tiny_model)}, "data": {"dataset": str(math_jsonl)},
                        "output_dir": str(tmp_path)}, None,
                       ["training.max_steps=3", "per_device_train_batch_size=4", "gradient_accumulation_steps=1",
                        "num_generations=4", "grpo.generation_batch_size=4", "max_completion_length=8",
                        "gradient_checkpointing=false", "save_steps=100", "runtime.device=cpu", "logging_steps=1"])
    with caplog.at_level("WARNING", logger="qlora_app"):
        d = Session(cfg, progress=False).run()
    from app.run import layout, store

    assert store.read_status(d)["status"] == layout.FINISHED and store.read_status(d)["step"] == 3
    assert "compiled sampling failed (RuntimeError: simulated compile failure)" in caplog.text
    assert "sampling with the training model instead" in caplog.text
    assert calls["n"] == 2  # after stepping down to TRL's path the copy is not tried again
