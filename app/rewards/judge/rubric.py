"""The judge's instructions and reading its score.

A rubric is plain text with ``{prompt}``, ``{completion}`` and ``{reference}`` where the task, the answer to grade and
the row's reference go (filled by plain replacement, so other braces, a JSON example for instance, stay as written).
It asks for a score from 0 to ``SCALE``; ``parse_score`` reads it from a reply in the forms judges write.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.errors import UserError

SCALE = 10
FIELDS = ("{prompt}", "{completion}", "{reference}")
NO_REFERENCE = "(none given)"

DEFAULT_RUBRIC = """You grade one answer to a task.

Task:
{prompt}

Reference answer:
{reference}

Answer to grade:
{completion}

Give a score from 0 to 10: 10 = correct, complete and clear (in agreement with the reference answer when one is \
given), 5 = partly right or incomplete, 0 = wrong, off-topic, empty or a refusal. Judge the content, not the length.
Reply with JSON only, like {"score": 7}."""

# A JSON Schema of the reply: servers that take structured output (vLLM, llama.cpp, Ollama) can only write this.
SCORE_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer", "enum": list(range(SCALE + 1))}},
                "required": ["score"]}


def load_rubric(path: str | None) -> str:
    """The rubric text: the file at ``path``, or ours. A file that cannot be read, or that never shows the judge the
    answer ({completion}), is one line."""
    if not path:
        return DEFAULT_RUBRIC
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"reward.judge.rubric: cannot read '{path}' ({type(e).__name__}); give a UTF-8 text file") \
            from None
    if "{completion}" not in text:
        raise UserError(f"reward.judge.rubric: '{path}' has no {{completion}}, so the judge would never see the "
                        "answer; put {completion} (and {prompt}, {reference} if it needs them) where they go")
    return text


def render(rubric: str, prompt: str, completion: str, reference: str | None) -> str:
    """The rubric with the row filled in (one pass, so a completion that writes "{reference}" stays as written)."""
    values = {"{prompt}": prompt, "{completion}": completion, "{reference}": reference or NO_REFERENCE}
    return re.sub(r"\{(?:prompt|completion|reference)\}", lambda m: values[m.group(0)], rubric)


_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_NUM = r"(-?\d+(?:\.\d+)?)"
_OUT_OF_RE = re.compile(_NUM + r"\s*(?:/|out\s+of)\s*(\d+)", re.IGNORECASE)
_SCORE_RE = re.compile(r"\b(?:score|rating|grade)\b[\"'*\s]{0,4}[:=]?[\"'*\s]{0,4}" + _NUM, re.IGNORECASE)


def parse_score(reply: str | None, scale: int = SCALE) -> float | None:
    """The score in a judge's reply as 0..1, or None when the reply holds none (or one outside the scale).

    >>> [parse_score(r) for r in ('{"score": 7}', "Score: 8/10", "I'd rate it 3 out of 5.", "9", "**Rating**: 10")]
    [0.7, 0.8, 0.6, 0.9, 1.0]
    >>> parse_score("The answer is great!"), parse_score('{"score": 42}'), parse_score("")
    (None, None, None)
    """
    if not reply:
        return None
    text = _THINK_RE.sub("", reply).strip()
    value = denominator = None
    start = text.find("{")
    if start != -1:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            found = {k.lower(): v for k, v in obj.items()} if isinstance(obj, dict) else {}
            v = found.get("score", found.get("rating"))
            value = float(v) if isinstance(v, (int, float, str)) and str(v).strip() else None
        except ValueError:
            value = None
    if value is None and (m := _OUT_OF_RE.search(text)):
        value, denominator = float(m.group(1)), float(m.group(2))
    if value is None and (m := list(_SCORE_RE.finditer(text))):
        value = float(m[-1].group(1))
    if value is None and re.fullmatch(_NUM + r"\.?", text):
        value = float(text.rstrip("."))
    if value is None:
        return None
    top = denominator or scale
    if top <= 0 or not 0 <= value <= top:
        return None
    return round(value / top, 4)
