"""The JSON an answer holds: where it is (a ```json block, the answer itself, the span from its first brace), its
value, and whether a reference is a JSON structure. Read by the json component (formats.py) and the json reference
match (match.py). Standard library only.

Owns: finding and decoding an answer's JSON. Must not score it.
"""

from __future__ import annotations

import json

from app.rewards import answer as A

MAX_JSON_CHARS = 100_000  # longer answers are cut before parsing: a flood costs the same as a page


def json_text(text: str) -> str | None:
    """The JSON an answer holds: the last ```json (or ```) block, else the answer itself when it starts with { or
    [, else the span from the first { or [ on."""
    t = A.strip_think(A.to_text(text))[:MAX_JSON_CHARS]
    fence = t.rfind("```")
    if fence != -1:
        start = t.rfind("```", 0, fence)
        if start != -1:
            block = t[start + 3:fence]
            return block.split("\n", 1)[1] if block.lower().startswith("json") and "\n" in block else block
    s = t.strip()
    if s[:1] in "{[" and s:
        return s
    starts = [i for i in (t.find("{"), t.find("[")) if i != -1]
    return t[min(starts):] if starts else None


def json_value(text) -> tuple[bool, object]:
    """(found, value): the first JSON value of the JSON an answer holds (``json_text``), decoded.

    >>> json_value('Here it is: {"a": 1} hope it helps')
    (True, {'a': 1})
    >>> json_value("no json")[0]
    False
    """
    candidate = json_text(text)
    if candidate is None:
        return False, None
    try:
        return True, json.JSONDecoder().raw_decode(candidate.strip())[0]
    except ValueError:
        return False, None


def is_json_structure(text: str) -> bool:
    """Whether a reference is a JSON object or list as a whole (not a number or a string that JSON also reads)."""
    s = text.strip()
    if s[:1] not in "{[":
        return False
    try:
        return isinstance(json.loads(s), (dict, list))
    except ValueError:
        return False
