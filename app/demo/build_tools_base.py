"""Build the tools demo's tiny base model: ``python -m app.demo.build_tools_base --out DIR``.

``qlora-app demo --tools`` needs a base that (1) speaks a tool-call format TRL parses (Qwen2.5's chat template, taken
as is from TRL's ``trl/chat_templates/qwen2_5.jinja``, so TRL's own response parser reads its calls), (2) knows how
to call the built-in calculator and copy its result into 'Final answer: N', but (3) uses the tool badly: on
two-digit word problems (``arith-calc``) it often sends the wrong operation, sometimes an expression the
calculator rejects, sometimes no call at all and a guessed number. Its pretraining holds no arithmetic at all, so
only a well-used calculator gets a problem right, and GRPO has one thing to learn: which call to make.

The pretraining text is chat transcripts rendered by the template itself (system turn with the tool's schema, the
question, the assistant's call, the tool's reply as TRL writes it, the final answer). Digits are single tokens (as
in Qwen's tokenizer), so the model copies numbers digit by digit. The problems come from ``app.data.arith`` with a
separate seed and never include the test split's questions. Everything is seeded; the shipped copy in
``app/assets/arith-tools-base`` was produced by this script with its defaults.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from app.data.arith import CALC_OPERANDS, generate_arith, split_rows
from app.demo.build_base import pretrain, run_builder
from app.tools.builtin import calculator

PRETRAIN_SEED = 778
# The demo preset's system prompt (presets/demo-tools.yaml says the same): most transcripts carry it.
TOOLS_SYSTEM_PROMPT = "Use the calculator for the arithmetic, then end with 'Final answer: <number>'."
SYSTEM_PROMPTS = [TOOLS_SYSTEM_PROMPT, "You are a helpful assistant.", None]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MODEL_SHAPE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=4, max_position_embeddings=512)
_EQ = re.compile(r"(\d+) ([+-]) (\d+) = \d+\.")
# How the base uses the tool (shares of transcripts): the right call, the other operation, a call the calculator
# rejects, no call and a number from the question. The right share keeps correct samples in GRPO's groups.
BEHAVIOUR = (("right", 0.25), ("other", 0.45), ("rejected", 0.15), ("no call", 0.15))
REJECTED = ("{a} and {b}", "{a} {op} {b} apples", "{a}{op}")


def chat_template() -> str:
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def tool_reply(expression: str) -> str:
    """The tool turn's text as a training run writes it: the calculator's result, or TRL's error dict."""
    try:
        return calculator(expression)
    except ValueError as e:
        return str({"error": str(e)})


def _call(expression: str) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "calculator",
                                                             "arguments": {"expression": expression}}}]}


def transcript(row: dict, rng: random.Random) -> list[dict]:
    """One problem answered the base's way (see BEHAVIOUR)."""
    m = _EQ.search(row["answer"])
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    r, kind = rng.random(), BEHAVIOUR[-1][0]
    for name, share in BEHAVIOUR:
        if r < share:
            kind = name
            break
        r -= share
    msgs = [{"role": "user", "content": row["question"]}]
    system = rng.choice(SYSTEM_PROMPTS)
    if system:
        msgs.insert(0, {"role": "system", "content": system})
    if kind == "no call":
        return msgs + [{"role": "assistant", "content": f"Final answer: {rng.choice([a, b])}"}]
    if kind == "rejected":
        expression = rng.choice(REJECTED).format(a=a, b=b, op=op)
    else:
        use = op if kind == "right" else ("-" if op == "+" else "+")
        x, y = (max(a, b), min(a, b)) if use == "-" else (a, b)
        expression = f"{x} {use} {y}"
    reply = tool_reply(expression)
    final = reply if reply.lstrip("-").isdigit() else str(rng.choice([a, b]))
    return msgs + [_call(expression), {"role": "tool", "name": "calculator", "content": reply},
                   {"role": "assistant", "content": f"Final answer: {final}"}]


def build_corpus(n_chats: int = 6000, seed: int = PRETRAIN_SEED) -> list[list[dict]]:
    rng = random.Random(seed)
    _, test = split_rows(CALC_OPERANDS)
    rows = generate_arith(n_chats, seed, exclude={r["question"] for r in test}, operands=CALC_OPERANDS)
    return [transcript(row, rng) for row in rows]


def build_tokenizer(texts: list[str], vocab_size: int = 800):
    """Byte-level BPE whose merges may cross spaces (the long, fixed tool preamble becomes a few tokens, as a large
    vocabulary makes it in a real model) but not lines: a newline is always a token of its own, so the text after
    the generation prompt's "assistant\\n" is tokenized the same way in a whole transcript and after the prompt
    (as a real tokenizer's pre-tokenizer keeps them apart). Every digit is a token of its own (as in Qwen's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", behavior="isolated"),
                                                 pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                   additional_special_tokens=SPECIAL[1:2])
    fast.chat_template = chat_template()
    return fast


def build(out: Path, steps: int = 3000, batch_size: int = 32, lr: float = 3e-3, n_chats: int = 6000,
          seed: int = PRETRAIN_SEED, log_every: int = 100) -> Path:
    """Train and save model + tokenizer into ``out``. Returns ``out``."""
    import jinja2
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import get_json_schema

    chats = build_corpus(n_chats, seed)
    schema = [get_json_schema(calculator)]
    # the template's text, for training the tokenizer before a tokenizer exists to render it
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: __import__("json").dumps(x, ensure_ascii=False)
    template = env.from_string(chat_template())
    tok = build_tokenizer([template.render(messages=c, tools=schema) for c in chats])
    ids = [tok.apply_chat_template(c, tools=schema, tokenize=True, return_dict=False) for c in chats]
    # A Llama body: transformers loads a "qwen2" model's tokenizer as Qwen's own class, which would replace this
    # tokenizer's digit-by-digit splitting with Qwen's; the template, not the body, is what makes the tool format.
    cfg = LlamaConfig(vocab_size=len(tok), tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, eos_token_id=tok.eos_token_id, **MODEL_SHAPE)
    return pretrain(LlamaForCausalLM, cfg, tok, ids, out, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                    log_every=log_every)


def main(argv: list[str] | None = None) -> None:
    run_builder(build, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
