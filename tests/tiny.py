"""Tiny random models for tests: real architectures (Llama, Qwen2, Qwen3), a tokenizer trained locally, a chat
template. Built from configs in a few seconds, so every test runs offline and the real 4-bit path is exercised."""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "Question: Tom has {a} apples and buys {b} more. How many apples does he have?",
    "Answer: {a} + {b} = {c}. Final answer: {c}",
    "The quick brown fox jumps over the lazy dog. As an AI language model I think the answer is {c}.",
    "Write a short poem about the sea and the sky. Solve the problem step by step, briefly.",
]


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = [t.format(a=a, b=b, c=a + b) for a in range(30) for b in range(0, 30, 7) for t in _CORPUS]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>",
        bos_token="<|endoftext|>",
    )
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    return fast


def build_model(arch: str, out: Path, tok_dir: Path) -> Path:
    """The suite's Llama / Qwen2 / Qwen3 fixtures: 2 layers, hidden 64, grouped-query attention."""
    extra = {"head_dim": 16} if arch == "qwen3" else {}
    return build_from_config({"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[arch], out, tok_dir,
                             hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False, **extra)


def build_from_config(model_type: str, out: Path, tok_dir: Path, **config) -> Path:
    """A tiny random model of any architecture transformers knows, from config keys given here (GPT-2 with a
    short learned position table, Gemma 2 without sdpa, ...), with the shared tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = AutoConfig.for_model(model_type, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                               eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, **config)
    model = AutoModelForCausalLM.from_config(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


# Mixture-of-experts families transformers 5.23 builds as causal LMs, each tiny (2 layers, hidden 64): their experts
# are fused 3-D parameters (app/model/experts.py). DeepSeek V3 and GLM-4-MoE keep their first layer dense.
MOE_COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, tie_word_embeddings=False)
MOE_FAMILIES = {
    "qwen3_moe": dict(intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                      head_dim=16),
    "qwen2_moe": dict(intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                      num_experts=8, num_experts_per_tok=2),
    "mixtral": dict(intermediate_size=64, num_local_experts=4, num_experts_per_tok=2),
    "olmoe": dict(intermediate_size=32, num_experts=8, num_experts_per_tok=2),
    "gpt_oss": dict(intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=64,
                    layer_types=["sliding_attention", "full_attention"]),
    "deepseek_v3": dict(intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                        n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16,
                        q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
    "glm4_moe": dict(intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                     n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, head_dim=16),
    "qwen3_5_moe_text": dict(layer_types=["linear_attention", "full_attention"], intermediate_size=128,
                             moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=8,
                             num_experts_per_tok=2, head_dim=16),
}


def build_moe(family: str, out: Path, tok_dir: Path) -> Path:
    """A tiny random mixture-of-experts model of ``family`` (a key of MOE_FAMILIES)."""
    return build_from_config(family, out, tok_dir, **{**MOE_COMMON, **MOE_FAMILIES[family]})
