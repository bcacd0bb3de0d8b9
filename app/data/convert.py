"""Raw rows -> what TRL's trainers take, using a ``Detection``.

GRPO wants ``prompt`` (+ our ``reference`` column, which TRL passes to the reward functions); SFT wants
``prompt``/``completion``, ``messages`` or ``text``; DPO (and ORPO) ``prompt`` / ``chosen`` / ``rejected``: the
pair app/data/preference.py reads from any preference layout, after the prompt every other method sees. Prompts are
conversational (lists of role/content messages) exactly when the tokenizer has a chat template, because TRL applies
the template to those and cannot to anything else; base models without a template get plain strings. Heavy libraries
are not imported here at all: the functions only call methods on the ``datasets.Dataset`` they are given.
"""

from __future__ import annotations

import logging

from app.data.detect import SOURCE, DataError, Detection
from app.data.images import IMAGES, decoding, undecoded
from app.data.preference import answer_text, pair_of, require_labels, require_pairs, shared_prompt
from app.data.profile import label_value, name_words, value_kind
from app.data.turns import ROLE_MAP, normalize_messages, plain_text, render_conversation, value_text, with_system
from app.data.vocabulary import CHOICE_WORDS, PASSAGE_WORDS

# the cell and turn helpers live in app/data/turns.py; they are part of this module's interface too
__all__ = ["ROLE_MAP", "normalize_messages", "render_conversation", "value_text", "with_system", "prompt_text",
           "reference_text", "completion_text", "prompt_messages", "plain_prompt", "to_grpo", "to_sft", "to_dpo",
           "to_kto"]

log = logging.getLogger("app.data")


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


def _split_conversation(msgs: list[dict]) -> tuple[list[dict], str | None]:
    """(the turns before a closing assistant turn, that turn's content). A conversation that ends with a user turn
    is all prompt (its last question is what to answer) and has no answer: (all turns, None)."""
    if msgs and msgs[-1]["role"] == "assistant":
        return msgs[:-1], msgs[-1]["content"]
    return msgs, None


def _conversation_source(row: dict, det: Detection) -> list[dict] | None:
    """The prompt as turns when the data itself is conversational (chat format, a TRL-style message prompt, or the
    turns preference answers share)."""
    if det.format == "preference" and det.prompt_field is None:
        return shared_prompt(row, det)
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
        if det.format == "preference" and det.pair_fields:  # ranked answers: the better one of this row
            pair = pair_of(row, det)
            return pair.chosen if pair else None
        return None
    v = row.get(det.reference_field)
    if det.reference_field in (det.chosen_field, det.rejected_field):  # a preference answer, not its transcript
        return answer_text(v)
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
    """What SFT trains the model to write: the worked solution when there is one, else the reference (preference
    data: the preferred answer)."""
    if det.format == "preference":
        pair = pair_of(row, det)
        return pair.chosen if pair else None
    if det.prompt_field is None and det.messages_field:
        return _split_conversation(normalize_messages(row.get(det.messages_field)))[1]
    if det.solution_field and value_text(row.get(det.solution_field)).strip():
        return value_text(row.get(det.solution_field))
    return reference_text(row, det)


def prompt_messages(row: dict, det: Detection, system_prompt: str | None) -> list[dict]:
    conv = _conversation_source(row, det)
    if conv is None or det.context_fields:
        conv = [{"role": "user", "content": prompt_text(row, det)}]
    return with_system([{"role": m["role"], "content": m["content"]} for m in conv], system_prompt)


def plain_prompt(row: dict, det: Detection, system_prompt: str | None) -> str:
    """A row's prompt for a model without a chat template (app.data.turns.plain_text: the one rule)."""
    return plain_text(prompt_text(row, det), system_prompt)


def _has_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _non_empty(v) -> bool:
    """Whether a row's value of the column (its input_columns) holds text: a conversation ending in content."""
    if isinstance(v, list):
        return bool(v) and bool(v[-1]["content"].strip())
    return bool(v and str(v).strip())


def _drop_empty(ds, column: str, what: str):
    before = len(ds)
    ds = ds.filter(_non_empty, input_columns=[column],
                   desc=f"dropping rows without {what}")  # that column alone: no picture decoded to drop a row
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
    msgs = with_system(normalize_messages(row.get(det.messages_field)), system_prompt)
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


def _apply(ds, fn, det: Detection, tokenizer, system_prompt: str | None, desc: str, keep: bool = False,
           also: tuple[str, ...] = ()):
    """``ds`` mapped by ``fn``; ``keep``: the data's other columns stay beside the ones ``fn`` makes (``also``:
    these of them)."""
    kwargs = {"det": det, "chat": _has_template(tokenizer), "system_prompt": system_prompt}
    made = ("prompt", "reference")
    # the rows' images (app/data/images.py) always travel with them: TRL reads them from this column
    drop = [c for c in ds.column_names if c in made or (not keep and c not in also and c != IMAGES)]
    # the pictures pass through as stored, never decoded here (app.data.images.undecoded says why)
    return decoding(undecoded(ds).map(fn, fn_kwargs=kwargs, remove_columns=drop, desc=desc))


def to_grpo(ds, det: Detection, tokenizer, system_prompt: str | None, keep_columns: bool = False):
    """Columns 'prompt' (messages with a chat template, else a string) and 'reference' (str or None);
    ``keep_columns``: the data's other columns too (an environment's reset(**row) and the reward functions get
    every column of the row, as TRL passes them)."""
    # a mix's dataset names stay (SOURCE): the reward functions see which dataset each prompt is from
    out = _apply(ds, _grpo_row, det, tokenizer, system_prompt, "formatting GRPO prompts", keep=keep_columns,
                 also=(SOURCE,))
    return _drop_empty(out, "prompt", "prompt")


def to_sft(ds, det: Detection, tokenizer, system_prompt: str | None, answers: str = "all"):
    """TRL SFT data: prompt/completion (conversational or plain), messages for chat data, text for text-only.

    Chat data becomes 'messages' when the tokenizer has a chat template; without one TRL could not apply it, so
    the conversation is rendered as plain 'text' ("User: ... / Assistant: ..."). ``answers`` (conversations):
    "turns" keeps 'messages' for TRL to mask every assistant turn; "last" splits each conversation into its prompt
    and its closing answer, as held-out rows are split (a conversation ending with a question is dropped, counted);
    "all" trains on every token."""
    if det.prompt_field is None and det.messages_field and answers == "last":  # as the held-out rows split them
        out = _apply(ds, _pair_row, det, tokenizer, system_prompt, "splitting conversations at the last answer")
        return _drop_empty(out, "completion", "closing assistant answer")
    if det.prompt_field is None and det.messages_field:
        out = _apply(ds, _conversation_row, det, tokenizer, system_prompt, "formatting conversations")
        return _drop_empty(out, "messages" if _has_template(tokenizer) else "text", "conversation")
    if det.reference_field is None and det.format != "preference":  # text-only: plain language modelling
        out = _apply(ds, _text_row, det, tokenizer, None, "formatting text")
        return _drop_empty(out, "text", "text")
    out = _apply(ds, _pair_row, det, tokenizer, system_prompt, "formatting SFT pairs")
    out = _drop_empty(out, "completion", "reference (completion)")
    return _drop_empty(out, "prompt", "prompt")


def _dpo_row(row: dict, det: Detection, chat: bool, system_prompt: str | None) -> dict:
    pair = pair_of(row, det)
    if pair is None:
        return {"prompt": None, "chosen": None, "rejected": None}
    if chat:
        return {"prompt": prompt_messages(row, det, system_prompt),
                "chosen": [{"role": "assistant", "content": pair.chosen}],
                "rejected": [{"role": "assistant", "content": pair.rejected}]}
    # A newline between prompt and answer, as for SFT: TRL concatenates the token sequences as they are.
    return {"prompt": plain_prompt(row, det, system_prompt), "chosen": "\n" + pair.chosen,
            "rejected": "\n" + pair.rejected}


def _no_pairs(ds, det, n: int) -> str:
    """Why no training row makes a pair, with the fix that can help: other fields only when a side is missing."""
    held = f" ({det.num_rows - n} more are held out)" if det.num_rows and det.num_rows > n else ""
    rows = ds.select(range(min(len(ds), 200))).to_list()
    sides = [(row.get(det.chosen_field or det.pair_fields[0]), row.get(det.rejected_field or det.pair_fields[1]))
             for row in rows]
    equal = sum(1 for c, r in sides if answer_text(c) is not None and answer_text(c) == answer_text(r))
    if equal == len(rows):
        return (f"none of the {n} training rows{held} makes a preference pair: the chosen and the rejected answer "
                "are the same in every row, so there is nothing to prefer; check how the file was made (or make "
                "pairs from a reward: qlora-app pairs)")
    return (f"none of the {n} training rows{held} makes a preference pair (a side missing or empty, the two answers "
            "equal, or a tie); check the fields with `qlora-app inspect` and pass --chosen-field / --rejected-field")


def require_a_pair(ds, det) -> None:
    """One line (DataError) when no row of ``ds`` makes a preference pair: checked before any model file is read,
    so a dry run says it too."""
    if not any(pair_of(row, det) is not None for row in ds):
        raise DataError(_no_pairs(ds, det, len(ds)))


def to_dpo(ds, det, tokenizer, system_prompt: str | None):
    """TRL's preference format (prompt / chosen / rejected; conversational with a chat template). Rows that make no
    pair are counted and skipped with one line; data with no pair at all is one line (DataError)."""
    require_pairs(det)
    out = _apply(ds, _dpo_row, det, tokenizer, system_prompt, "formatting preference pairs")
    before = len(out)
    out = out.filter(lambda row: row["chosen"] is not None, desc="dropping rows that make no pair")
    if len(out) == 0:
        raise DataError(_no_pairs(ds, det, before))
    if len(out) < before:
        log.warning("skipped %d of %d rows that make no preference pair (a side missing, chosen equal to rejected, "
                    "or a tie)", before - len(out), before)
    return out


def _kto_row(row: dict, det: Detection, chat: bool, system_prompt: str | None) -> dict:
    out = _pair_row(row, det, chat, system_prompt)
    return {**out, "label": label_value(row.get(det.desirable_field)) is True}


def _both_sides(batch: dict) -> dict:
    """Preference pairs as KTO's labelled answers: each pair's chosen answer (good) and its rejected one (bad)."""
    out = {k: [] for k in ("prompt", "completion", "label")}
    for prompt, chosen, rejected in zip(batch["prompt"], batch["chosen"], batch["rejected"]):
        for answer, good in ((chosen, True), (rejected, False)):
            out["prompt"].append(prompt)
            out["completion"].append(answer)
            out["label"].append(good)
    return out


def to_kto(ds, det, tokenizer, system_prompt: str | None):
    """TRL's unpaired format for KTO (prompt / completion / label): unpaired rows as they are labelled, or each
    preference pair as its chosen answer (label true) and its rejected one (false). One line for data with neither."""
    require_labels(det)
    if det.format == "preference":
        pairs = to_dpo(ds, det, tokenizer, system_prompt)
        return pairs.map(_both_sides, batched=True, remove_columns=pairs.column_names,
                         desc="splitting pairs into good and bad answers")
    out = _apply(ds, _kto_row, det, tokenizer, system_prompt, "formatting labelled answers")
    return _drop_empty(_drop_empty(out, "completion", "answer"), "prompt", "prompt")
