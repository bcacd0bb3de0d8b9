"""Keep every sequence inside the positions the model was built for.

Past its context a model with a learned position table (GPT-2, OPT) fails with an IndexError deep in its embedding,
and a rotary model degrades silently. TRL 1.x does not truncate GRPO prompts, and SFT's max_length (1024 by
default) can exceed a small model's context. So, once the model is loaded:

- GRPO (and distillation, whose student samples too): a prompt that leaves no room for its max_completion_length is
  dropped (said once, with the count); a
  completion length that alone fills the context (a default on a small model) is halved, saying so.
- SFT: max_length is lowered to the context (TRL truncates each example there; packed examples restart their
  positions, so a packed row of that length stays inside it).
Each step returns the config changes it decided ({dotted key: value}); the run plan (app/train/planning/plan.py) applies
and records them. Nothing here edits a config.
"""

from __future__ import annotations

import logging

from app.config.fields import get_key
from app.config.methods import method_of
from app.errors import UserError

log = logging.getLogger("qlora_app")

SPECIAL_TOKEN_ROOM = 2  # BOS/EOS a tokenizer may add beyond the rendered text


def _rendered(tok, prompt, tools: list[dict] | None = None) -> tuple[str, bool]:
    """The prompt as the trainer will tokenize it (with the run's tools' schemas, which the template renders), and
    whether the tokenizer adds its special tokens to it."""
    if isinstance(prompt, list):
        return tok.apply_chat_template(prompt, tools=tools or None, tokenize=False, add_generation_prompt=True), False
    return prompt, True


def _count(tok, text: str, add_special: bool) -> int:
    return len(tok(text, add_special_tokens=add_special)["input_ids"])


def fit_grpo(cfg, ds, tok, context: int | None, note=log.warning, tools: list[dict] | None = None
             ) -> tuple[dict, object]:
    """(changes, ds) for a GRPO run inside the model's context: a completion length that fills the whole context is
    halved to leave room for prompts (a change of grpo.max_completion_length), and rows whose prompt leaves less
    than it are dropped."""
    if context is None:
        return {}, ds
    changes = {}
    key = method_of(cfg).completion_key  # the length of the answers the trained model samples
    completion = get_key(cfg, key)
    if completion >= context:
        shorter = context // 2
        note(f"{key}={completion} fills the model's whole {context}-token context: using "
             f"{shorter} so prompts fit (set {key} below {context} to choose)")
        changes[key] = completion = shorter
    return changes, fit_grpo_prompts(ds, tok, context, completion, note, tools, key)


def fit_grpo_prompts(ds, tok, context: int, max_completion_length: int, note=log.warning,
                     tools: list[dict] | None = None, key: str = "grpo.max_completion_length"):
    """``ds`` without the rows whose prompt leaves less than max_completion_length tokens of the context (``key``:
    the setting it is, as said)."""
    room = context - max_completion_length
    too_long = []
    for i, prompt in enumerate(ds["prompt"]):
        text, add_special = _rendered(tok, prompt, tools)
        # Every token covers at least one byte of its text, so most prompts need no tokenizing.
        if len(text.encode()) + SPECIAL_TOKEN_ROOM > room and _count(tok, text, add_special) > room:
            too_long.append(i)
    if not too_long:
        return ds
    if len(too_long) == len(ds):
        raise UserError(f"every prompt is longer than the {room} tokens the model's {context}-token context leaves "
                        f"beside {key}={max_completion_length}; lower {key} or use a model with a longer context")
    note(f"dropped {len(too_long)} of {len(ds)} rows whose prompt is longer than the {room} tokens left of the "
         f"model's {context}-token context beside {key}={max_completion_length}")
    drop = set(too_long)
    return ds.select([i for i in range(len(ds)) if i not in drop])


def fit_sft_length(cfg, context: int | None, note=log.warning) -> dict:
    """The change that keeps training.max_length inside the model's context (none when it fits)."""
    if context is None or cfg.training.max_length <= context:
        return {}
    note(f"training.max_length={cfg.training.max_length} is longer than the model's {context}-token context: "
         f"examples are cut at {context} tokens")
    return {"training.max_length": context}
