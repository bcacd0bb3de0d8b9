"""Raw rows -> what TRL's trainers take, using a ``Detection``.

GRPO wants ``prompt`` (+ our ``reference`` column, which TRL passes to the reward functions); SFT wants
``prompt``/``completion``, ``messages`` or ``text``. Prompts are conversational (lists of role/content messages)
exactly when the tokenizer has a chat template, because TRL applies the template to those and cannot to anything
else; base models without a template get plain strings. Heavy libraries are not imported here at all: the functions
only call methods on the ``datasets.Dataset`` they are given.
"""

from __future__ import annotations

import json
import logging

from app.data.detect import CHOICE_WORDS, PASSAGE_WORDS, DataError, Detection
from app.data.profile import name_words, value_kind

log = logging.getLogger("app.data")

# ShareGPT and other dialects -> the role names chat templates understand.
ROLE_MAP = {"human": "user", "user": "user", "prompter": "user", "question": "user",
            "gpt": "assistant", "assistant": "assistant", "bot": "assistant", "model": "assistant",
            "chatgpt": "assistant", "ai": "assistant", "answer": "assistant", "system": "system"}


def value_text(v) -> str:
    """Any cell as readable text: lists joined by lines, dicts by their text-like key."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, dict) for x in v) and value_kind(list(v)) == "messages":
            return render_conversation(normalize_messages(v))
        return "\n".join(t for t in (value_text(x) for x in v) if t)
    if isinstance(v, dict):
        for k in ("text", "value", "answer", "answers", "ground_truth", "normalized_value", "target", "solution",
                  "label", "contexts", "content"):
            if k in v and value_text(v[k]):
                return value_text(v[k])
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)


def choices_text(v) -> str:
    """ARC {"text": [...], "label": [...]} or MMLU ["...", "..."] -> 'A. ...' lines."""
    if isinstance(v, dict) and isinstance(v.get("text"), list):
        labels = v.get("label") or [chr(65 + i) for i in range(len(v["text"]))]
        return "\n".join(f"{lab}. {value_text(t)}" for lab, t in zip(labels, v["text"]))
    if isinstance(v, dict) and v and all(isinstance(x, str) for x in v.values()):  # MedQA {"A": "...", ...}
        return "\n".join(f"{k}. {t}" for k, t in v.items())
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, dict) and "text" in x for x in v):  # [{"label": "A", "text": "..."}]
            return "\n".join(f"{x.get('label') or chr(65 + i)}. {value_text(x['text'])}" for i, x in enumerate(v))
        return "\n".join(f"{chr(65 + i)}. {value_text(t)}" for i, t in enumerate(v))
    return value_text(v)


def normalize_messages(msgs) -> list[dict]:
    """Any list of turns -> [{"role": "user"|"assistant"|"system"|..., "content": str}]."""
    out = []
    for m in msgs or []:
        if not isinstance(m, dict):
            continue
        role = next((m[k] for k in ("role", "from", "speaker", "author", "sender") if m.get(k) is not None), "user")
        content = next((m[k] for k in ("content", "value", "text", "message", "utterance") if k in m), "")
        if isinstance(content, list):  # multimodal-style parts: keep the text ones
            content = "\n".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in content)
        role = str(role).strip().lower()
        out.append({"role": ROLE_MAP.get(role, role), "content": value_text(content)})
    return out


def render_conversation(msgs: list[dict]) -> str:
    """Plain-text form for tokenizers without a chat template; a single user turn is just its content."""
    if len(msgs) == 1 and msgs[0]["role"] == "user":
        return msgs[0]["content"]
    return "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in msgs)


def _split_conversation(msgs: list[dict]) -> tuple[list[dict], str | None]:
    """(the turns before a closing assistant turn, that turn's content). A conversation that ends with a user turn
    is all prompt (its last question is what to answer) and has no answer: (all turns, None)."""
    if msgs and msgs[-1]["role"] == "assistant":
        return msgs[:-1], msgs[-1]["content"]
    return msgs, None


def _conversation_source(row: dict, det: Detection) -> list[dict] | None:
    """The prompt as turns when the data itself is conversational (chat format or a TRL-style message prompt)."""
    if det.prompt_field is None and det.messages_field:
        return _split_conversation(normalize_messages(row.get(det.messages_field)))[0]
    v = row.get(det.prompt_field) if det.prompt_field else None
    if isinstance(v, (list, tuple)) and value_kind(list(v)) == "messages":
        return _split_conversation(normalize_messages(v))[0]
    return None


def prompt_text(row: dict, det: Detection) -> str:
    """The user prompt for one raw row: passages (context, article) first, then the prompt, then inputs/options."""
    conv = _conversation_source(row, det)
    main = render_conversation(conv) if conv is not None else value_text(row.get(det.prompt_field))
    before, after = [], []
    for c in det.context_fields:
        words = set(name_words(c))
        text = choices_text(row.get(c)) if words & CHOICE_WORDS else value_text(row.get(c))
        if len(c) == 1 and c.isalpha() and text.strip():  # option columns A, B, C, D
            text = f"{c}. {text.strip()}"
        if text.strip():
            (before if words & PASSAGE_WORDS else after).append(text.strip())
    return "\n\n".join(p for p in [*before, main.strip(), *after] if p)


def reference_text(row: dict, det: Detection) -> str | None:
    """The reference answer as a string, or None. GSM8K's '... #### 42' is kept whole (the reward extracts it)."""
    if not det.reference_field:
        return None
    v = row.get(det.reference_field)
    if isinstance(v, int) and not isinstance(v, bool):
        # MMLU-style: an index into the answer options is the option's letter, which is what the prompt shows.
        for c in det.context_fields:
            if set(name_words(c)) & CHOICE_WORDS:
                opts = row.get(c)
                labels = opts.get("label") if isinstance(opts, dict) else None
                n = len(opts.get("text") or []) if isinstance(opts, dict) else len(opts or [])
                if 0 <= v < n:
                    return str(labels[v]) if labels else chr(65 + v)
    if isinstance(v, (list, tuple)) and v and value_kind(list(v)) == "messages":
        msgs = normalize_messages(v)
        answer = _split_conversation(msgs)[1]
        if answer is None and det.reference_field == det.messages_field:
            return None  # chat data: a conversation that ends with a question has no answer to judge against
        text = answer if answer is not None else "\n".join(m["content"] for m in msgs)
    elif isinstance(v, (list, tuple)):
        text = next((value_text(x) for x in v if value_text(x).strip()), "")  # SQuAD-style: the first answer
    elif isinstance(v, dict) and isinstance(v.get("text"), list) and "label" not in v:
        text = next((value_text(x) for x in v["text"] if value_text(x).strip()), "")
    else:
        text = value_text(v)
    return text if text.strip() else None


def completion_text(row: dict, det: Detection) -> str | None:
    """What SFT trains the model to write: the worked solution when there is one, else the reference."""
    if det.prompt_field is None and det.messages_field:
        return _split_conversation(normalize_messages(row.get(det.messages_field)))[1]
    if det.solution_field and value_text(row.get(det.solution_field)).strip():
        return value_text(row.get(det.solution_field))
    return reference_text(row, det)


def _with_system(msgs: list[dict], system_prompt: str | None) -> list[dict]:
    if not system_prompt:
        return msgs
    if msgs and msgs[0]["role"] == "system":  # keep the data's own system turn, after ours
        return [{"role": "system", "content": f"{system_prompt}\n\n{msgs[0]['content']}"}, *msgs[1:]]
    return [{"role": "system", "content": system_prompt}, *msgs]


def prompt_messages(row: dict, det: Detection, system_prompt: str | None) -> list[dict]:
    conv = _conversation_source(row, det)
    if conv is None or det.context_fields:
        conv = [{"role": "user", "content": prompt_text(row, det)}]
    return _with_system([{"role": m["role"], "content": m["content"]} for m in conv], system_prompt)


def plain_prompt(row: dict, det: Detection, system_prompt: str | None) -> str:
    text = prompt_text(row, det)
    return f"{system_prompt}\n\n{text}" if system_prompt else text


def _has_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _non_empty(row: dict, column: str) -> bool:
    v = row[column]
    if isinstance(v, list):
        return bool(v) and bool(v[-1]["content"].strip())
    return bool(v and str(v).strip())


def _drop_empty(ds, column: str, what: str):
    before = len(ds)
    ds = ds.filter(_non_empty, fn_kwargs={"column": column}, desc=f"dropping rows without {what}")
    if len(ds) < before:
        log.warning("dropped %d of %d rows with an empty %s", before - len(ds), before, what)
    if len(ds) == 0:
        raise DataError(f"every row has an empty {what}; check the fields with `qlora-app inspect` and pass "
                        "--prompt-field / --reference-field")
    return ds


# The row functions are module-level and get their settings through fn_kwargs: datasets fingerprints the function
# and its arguments to cache the result, and closures over these helpers cannot be hashed.


def _grpo_row(row: dict, det: Detection, chat: bool, system_prompt: str | None) -> dict:
    prompt = prompt_messages(row, det, system_prompt) if chat else plain_prompt(row, det, system_prompt)
    return {"prompt": prompt, "reference": reference_text(row, det)}


def _conversation_row(row: dict, det: Detection, chat: bool, system_prompt: str | None) -> dict:
    msgs = _with_system(normalize_messages(row.get(det.messages_field)), system_prompt)
    return {"messages": msgs} if chat else {"text": render_conversation(msgs)}


def _text_row(row: dict, det: Detection, chat: bool, system_prompt: str | None) -> dict:
    return {"text": prompt_text(row, det)}


def _pair_row(row: dict, det: Detection, chat: bool, system_prompt: str | None) -> dict:
    target = completion_text(row, det) or ""
    if chat:
        return {"prompt": prompt_messages(row, det, system_prompt),
                "completion": [{"role": "assistant", "content": target}]}
    # A newline between prompt and completion: TRL concatenates the two token sequences as they are.
    return {"prompt": plain_prompt(row, det, system_prompt), "completion": "\n" + target if target else ""}


def _apply(ds, fn, det: Detection, tokenizer, system_prompt: str | None, desc: str):
    kwargs = {"det": det, "chat": _has_template(tokenizer), "system_prompt": system_prompt}
    return ds.map(fn, fn_kwargs=kwargs, remove_columns=ds.column_names, desc=desc)


def to_grpo(ds, det: Detection, tokenizer, system_prompt: str | None):
    """Columns 'prompt' (messages with a chat template, else a string) and 'reference' (str or None)."""
    out = _apply(ds, _grpo_row, det, tokenizer, system_prompt, "formatting GRPO prompts")
    return _drop_empty(out, "prompt", "prompt")


def to_sft(ds, det: Detection, tokenizer, system_prompt: str | None):
    """TRL SFT data: prompt/completion (conversational or plain), messages for chat data, text for text-only.

    Chat data becomes 'messages' when the tokenizer has a chat template; without one TRL could not apply it, so
    the conversation is rendered as plain 'text' ("User: ... / Assistant: ...")."""
    if det.prompt_field is None and det.messages_field:
        out = _apply(ds, _conversation_row, det, tokenizer, system_prompt, "formatting conversations")
        return _drop_empty(out, "messages" if _has_template(tokenizer) else "text", "conversation")
    if det.reference_field is None:  # text-only: plain language modelling on the text
        out = _apply(ds, _text_row, det, tokenizer, None, "formatting text")
        return _drop_empty(out, "text", "text")
    out = _apply(ds, _pair_row, det, tokenizer, system_prompt, "formatting SFT pairs")
    out = _drop_empty(out, "completion", "reference (completion)")
    return _drop_empty(out, "prompt", "prompt")
