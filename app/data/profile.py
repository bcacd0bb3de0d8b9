"""What a column's values look like: their kind (text, number, conversation, ...) and a profile of a bounded
sample, which detection (app/data/detect.py) and conversion (app/data/convert.py) read. Standard library only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CONVERSATION_ROLE_KEYS = ("role", "from", "speaker", "author", "sender")
CONVERSATION_TEXT_KEYS = ("content", "value", "text", "message", "utterance")


def name_words(name: str) -> list[str]:
    """'answerKey' -> ['answer', 'key']; 'final_answer' -> ['final', 'answer']; 'Question' -> ['question']."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", str(name))
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    spaced = re.sub(r"([A-Za-z])([0-9])", r"\1 \2", spaced)  # 'sentence1' -> 'sentence 1'; 'r1' -> 'r 1'
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def _is_message(x) -> bool:
    return isinstance(x, dict) and any(k in x for k in CONVERSATION_ROLE_KEYS) and any(
        k in x for k in CONVERSATION_TEXT_KEYS)


def value_kind(v) -> str:
    """One of: empty, text, number, bool, messages, list_text, choices, answer_dict, dict, other."""
    if v is None or (isinstance(v, float) and v != v):  # None or NaN (pandas fills CSV gaps with NaN)
        return "empty"
    if isinstance(v, str):
        return "text" if v.strip() else "empty"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, (list, tuple)):
        items = [x for x in v if x is not None]
        if not items:
            return "empty"
        if all(_is_message(x) for x in items):
            return "messages"
        if all(isinstance(x, str) for x in items):
            return "list_text"
        return "other"
    if isinstance(v, dict):
        keys = {k.lower() for k in v}
        if "text" in keys and "label" in keys and isinstance(v.get("text"), list):
            return "choices"  # ARC: {"text": [...], "label": ["A", "B", ...]}
        if keys & {"text", "value", "answer", "answers", "normalized_value", "contexts", "ground_truth"}:
            return "answer_dict"  # SQuAD {"text": [...], "answer_start": [...]}, TriviaQA {"value": ...}
        return "dict"
    return "other"


# How people write a good / bad label (case and surrounding spaces aside): a column whose every value is one of these,
# with both sides present, is a label column however it is spelled (KTO's unpaired data, a thumbs column).
LABEL_SPELLINGS = {
    True: {"true", "yes", "y", "t", "1", "good", "positive", "pos", "desirable", "accept", "accepted", "chosen",
           "\U0001F44D", "+1", "up", "thumbs up", "\u2713", "\u2714"},
    False: {"false", "no", "n", "f", "0", "bad", "negative", "neg", "undesirable", "reject", "rejected",
            "\U0001F44E", "-1", "down", "thumbs down", "\u2717", "\u2718"},
}


def label_value(v) -> bool | None:
    """True / False for a value spelled as a good / bad label (a bool, 1 / 0, "yes" / "no", 👍 / 👎, ...), else
    None."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        return True if s in LABEL_SPELLINGS[True] else False if s in LABEL_SPELLINGS[False] else None
    return None


@dataclass
class Profile:
    name: str
    words: list[str]
    kind: str  # dominant non-empty kind
    share: float  # fraction of sampled rows that are non-empty and of that kind
    avg_len: float  # characters of the text form
    distinct: float  # distinct values / non-empty values
    spaces: float  # fraction of text values with whitespace (prose vs codes / ids)
    has_assistant: bool = False  # for messages: does the conversation contain an answer turn?
    sample: list = field(default_factory=list, repr=False)  # a few non-empty values, for nested-key lookups
    labels: bool = False  # every value spells a good / bad label and both appear (label_value)
    values: tuple = ()  # a short column's distinct values as written (up to 6), for messages about it

    @property
    def categorical(self) -> bool:
        return self.kind == "text" and self.distinct <= 0.3 and self.avg_len < 40

    @property
    def id_like(self) -> bool:
        return self.kind == "text" and self.spaces < 0.1 and self.avg_len < 48 and self.distinct > 0.9


def profile_column(name: str, values: list) -> Profile:
    kinds: dict[str, int] = {}
    for v in values:
        k = value_kind(v)
        kinds[k] = kinds.get(k, 0) + 1
    non_empty = [v for v in values if value_kind(v) != "empty"]
    kinds.pop("empty", None)
    kind = max(kinds, key=kinds.get) if kinds else "empty"
    share = kinds.get(kind, 0) / max(len(values), 1)
    texts = [str(v) for v in non_empty]
    avg_len = sum(map(len, texts)) / len(texts) if texts else 0.0
    distinct = len(set(texts)) / len(texts) if texts else 0.0
    spaces = sum(1 for t in texts if any(c.isspace() for c in t.strip())) / len(texts) if texts else 0.0
    has_assistant = False
    if kind == "messages":
        has_assistant = any(
            str(next((m[k] for k in CONVERSATION_ROLE_KEYS if k in m), "")).lower()
            in ("assistant", "gpt", "bot", "model", "chatgpt", "ai")
            for v in non_empty if isinstance(v, (list, tuple)) for m in v if isinstance(m, dict))
    read = [label_value(v) for v in non_empty]
    labels = bool(read) and None not in read and len(set(read)) == 2
    values = tuple(dict.fromkeys(texts))[:6] if len(set(texts)) <= 6 else ()
    return Profile(name, name_words(name), kind, share, avg_len, distinct, spaces, has_assistant, non_empty[:8],
                   labels, values)


def spread_sample(ds, n: int) -> list[dict]:
    """Up to n rows spread evenly over the dataset (the first rows of a file are often unrepresentative, e.g. an
    Alpaca file that starts with empty inputs); selecting by index is cheap on Arrow-backed data."""
    total = len(ds)
    if total <= n:
        return ds.to_list() if hasattr(ds, "to_list") else list(ds)
    step = total / n
    return ds.select([int(i * step) for i in range(n)]).to_list()


