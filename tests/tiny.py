"""Tiny random models for tests: real architectures (Llama, Qwen2, Qwen3), a tokenizer trained locally, a chat
template. Built from configs in a few seconds, so every test runs offline and the real 4-bit path is exercised."""

from __future__ import annotations

import json
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


def build_tokenizer(out: Path, extra: list[str] = (), eos: str = "<|im_end|>", kind: str = "byte_level",
                    tokenizer_class: str | None = None, template: str = CHATML):
    """A BPE tokenizer trained on a small corpus here. ``kind``: "byte_level" (GPT-2's, Llama 3's and Qwen's kind),
    "byte_fallback" (SentencePiece's kind as Gemma 4 ships it in tokenizer.json alone: spaces as "▁", unknown
    characters as byte tokens) or "sentencepiece" (a SentencePiece model, tokenizer.model beside the tokenizer.json
    transformers makes of it, as Gemma 3 ships it); ``extra``: special tokens (a chat template's);
    ``tokenizer_class``: the class tokenizer_config.json names (the converter reads it for Phi-4); ``template``: the
    chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = [t.format(a=a, b=b, c=a + b) for a in range(30) for b in range(0, 30, 7) for t in _CORPUS]
    specials = ["<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    specials += [t for t in extra if t not in specials]
    if kind == "sentencepiece":
        return _sentencepiece(out, lines, specials, eos, template)
    if kind == "byte_fallback":
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizers.Replace(Regex(" "), "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("\u2581"), behavior="merged_with_next")
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)])
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token=eos,
        bos_token="<|endoftext|>",
    )
    fast.chat_template = template
    fast.save_pretrained(out)
    if tokenizer_class:
        path = out / "tokenizer_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "tokenizer_class": tokenizer_class}))
    return fast


def _sentencepiece(out: Path, lines, specials, eos: str, template: str):
    """Gemma's kind: a SentencePiece BPE model with byte fallback and no space put before the text."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    named = ["<pad>", eos, "<|endoftext|>", "<unk>"]
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(out / "tokenizer"), vocab_size=480, model_type="bpe", byte_fallback=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False, minloglevel=2,
        user_defined_symbols=[t for t in specials if t not in named], pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece=eos, bos_piece="<|endoftext|>", unk_piece="<unk>")
    corpus.unlink()
    (out / "tokenizer.vocab").unlink()
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<|endoftext|>", "eos_token": eos, "pad_token": "<pad>",
        "unk_token": "<unk>"}))
    tok = AutoTokenizer.from_pretrained(out)  # transformers' tokenizer.json made from the SentencePiece model
    tok.chat_template = template
    keep = (out / "tokenizer.model").read_bytes()
    tok.save_pretrained(out)
    (out / "tokenizer.model").write_bytes(keep)  # the hub's folders ship both
    return tok


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
    config = {"vocab_size": len(tok), **config}  # a head padded past the tokenizer: a larger vocab_size given
    cfg = AutoConfig.for_model(model_type, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                               bos_token_id=tok.bos_token_id, **config)
    model = AutoModelForCausalLM.from_config(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out)
    for f in tok_dir.iterdir():  # the tokenizer's files as they are (a SentencePiece model too), not saved again
        (out / f.name).write_bytes(f.read_bytes())
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


# The text families people fine-tune in 2026, each as a tiny random model (2 layers, hidden 64) with the chat template
# its real checkpoints carry where TRL ships it (trl/chat_templates), the template's special tokens in the tokenizer
# and its end-of-turn token as EOS. A family TRL ships no template for gets CHATML as a stand-in (``template`` None).
# (display name, model_type, config keys, TRL template or None, end-of-turn token, tokenizer options)
DENSE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=512, tie_word_embeddings=False)
FAMILIES = {
    "llama3": ("Llama 3.x", "llama", {}, "llama3_1", "<|eot_id|>", {}),
    "qwen2_5": ("Qwen2.5", "qwen2", {}, "qwen2_5", "<|im_end|>", {}),
    "qwen3": ("Qwen3", "qwen3", {"head_dim": 16}, "qwen3", "<|im_end|>", {}),
    "qwen3_5": ("Qwen3.5 (text)", "qwen3_5_text",
                {"head_dim": 16, "layer_types": ["linear_attention", "full_attention"]}, "qwen3_5_nothink",
                "<|im_end|>", {}),
    "qwen3_moe": ("Qwen3-MoE", "qwen3_moe", {**MOE_FAMILIES["qwen3_moe"], "norm_topk_prob": True}, "qwen3",
                  "<|im_end|>", {}),  # its checkpoints normalize the top-k weights, as llama.cpp always does
    "gemma3": ("Gemma 3 (text)", "gemma3_text", {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 64},
               "gemma3", "<end_of_turn>", {"kind": "sentencepiece"}),
    "gemma4": ("Gemma 4 (text)", "gemma4_text", {"head_dim": 16, "global_head_dim": 32, "sliding_window": 64,
                                                "hidden_size_per_layer_input": 16, "vocab_size_per_layer_input": 600},
               "gemma4", "<turn|>", {"kind": "byte_fallback"}),
    "gpt_oss": ("gpt-oss", "gpt_oss", MOE_FAMILIES["gpt_oss"], "gptoss", "<|return|>", {}),
    "phi4": ("Phi-4", "phi3", {}, "phi3_5", "<|end|>", {"tokenizer_class": "GPT2Tokenizer"}),
    "mistral": ("Mistral", "mistral", {"head_dim": 16}, None, "<|im_end|>", {}),
    "ministral": ("Ministral", "ministral", {"head_dim": 16}, None, "<|im_end|>", {}),
    "smollm3": ("SmolLM3", "smollm3", {}, None, "<|im_end|>", {}),
    "olmo3": ("OLMo 3", "olmo3", {}, None, "<|im_end|>", {}),
    "glm4": ("GLM-4", "glm4", {"head_dim": 16}, "glm4moe", "<|user|>", {}),
}


def template_tokens(template: str) -> list[str]:
    """The special tokens a chat template writes (``<|im_start|>``, ``<start_of_turn>``, ``</tool_call>``, ...)."""
    import re

    return sorted(set(re.findall(r"<[|/]?[A-Za-z_][A-Za-z0-9_|]*\|?>|\[gMASK\]", template)))


def build_family(family: str, out: Path) -> Path:
    """A tiny random model of ``family`` (a key of FAMILIES) with its chat template and a tokenizer for it."""
    from app.model.templates import template_file

    _, model_type, keys, template, eos, options = FAMILIES[family]
    text = CHATML if template is None else template_file(template).read_text(encoding="utf-8")
    tok_dir = out.parent / f"{out.name}-tok"
    build_tokenizer(tok_dir, extra=template_tokens(text), eos=eos, template=text, **options)
    return build_from_config(model_type, out, tok_dir, **{**DENSE, **MOE_COMMON, **keys})


def add_mtp(folder: Path) -> dict:
    """A multi-token-prediction layer in a tiny Qwen3.5's checkpoint, as Qwen publishes it: ``mtp.fc`` (hidden x
    2 hidden), its three norms and ``mtp.layers.0`` (a full-attention decoder layer), and the config's
    ``mtp_num_hidden_layers: 1``. Returns the added tensors."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    hidden, last = config["hidden_size"], config["num_hidden_layers"] - 1  # the last layer: full attention
    g = torch.Generator().manual_seed(7)
    mtp = {k.replace(f"model.layers.{last}.", "mtp.layers.0."): v + 0.01 * torch.randn(v.shape, generator=g)
           for k, v in weights.items() if k.startswith(f"model.layers.{last}.")}
    mtp["mtp.fc.weight"] = 0.02 * torch.randn(hidden, 2 * hidden, generator=g)
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        mtp[f"mtp.{norm}.weight"] = 1 + 0.01 * torch.randn(hidden, generator=g)
    save_file({**weights, **mtp}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({**config, "mtp_num_hidden_layers": 1}, indent=1))
    return mtp
