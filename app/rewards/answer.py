"""Final-answer extraction and comparison against a reference.

The rules, in order of trust:

* ``<think>...</think>`` is reasoning, not the answer: it is removed before anything is judged.
* The completion's answer is its FINAL one: the last ``\\boxed{}``, else the last "final answer:" / "answer:" line,
  else the last "the answer is X", else the last number, else (for short texts) the last line.
* A reference in GSM8K form ("... #### 42") means the number after ``####``; a ``\\boxed{}`` reference means the
  boxed content.
* Plain numbers compare numerically ("1,000" = "1000", "$18" = "18", "2.50" = "2.5", "50%" = "50"); LaTeX and
  fractions go to math-verify with a time bound; anything else compares as case- and whitespace-insensitive text.

Every scan is bounded: only the last ``TAIL_CHARS`` characters are searched for the answer, regexes are linear
(no nested quantifiers), and math-verify only ever sees short extracted strings. sympy/math-verify are imported
lazily because they cost ~0.6 s and the CLI imports this package for ``score``.
"""

from __future__ import annotations

import re
import threading
from decimal import Decimal, InvalidOperation
from functools import lru_cache

TAIL_CHARS = 4000  # the final answer lives at the end; a 1 MB completion costs the same as a 4 KB one
MAX_ANSWER_CHARS = 300  # longer "answers" are prose, not something math-verify should chew on
MATH_VERIFY_TIMEOUT_S = 1  # signal.alarm granularity is whole seconds

# A number: optional sign (not a hyphen glued to a word, so "3-4" is 3 and 4), thousands groups, decimals.
_NUM_RE = re.compile(r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|(?<![\w.])[-−]?\.\d+")
# Bounded gaps ({0,4}) instead of \s*: two adjacent unbounded runs would backtrack quadratically on long spaces.
# Also accepts markdown: "**Final Answer:** 42", "**Answer**: 42".
_FINAL_RE = re.compile(r"\b(?:final[ \t]{1,3}answer|answer)[*_ \t]{0,4}(?:is[*_ \t]{0,4})?[:：]", re.IGNORECASE)
_ANSWER_IS_RE = re.compile(r"\b(?:final\s+)?answer\s+(?:is|=|would\s+be|should\s+be)\b\s*", re.IGNORECASE)
_IS_THE_ANSWER_RE = re.compile(r"(\S{1,40})\s+is\s+the\s+(?:final\s+|correct\s+)?answer\b", re.IGNORECASE)
_GSM8K_RE = re.compile(r"####\s*")
_LATEXY_RE = re.compile(r"\\[a-zA-Z]+|[\^_{}]|\d\s*/\s*\d|\bsqrt\b|\bpi\b")
_WS_RE = re.compile(r"\s+")
_MD_RE = re.compile(r"[*_`]+")


def to_text(completion) -> str:
    """A TRL completion (a string, or a chat list of {"role", "content"}) as plain text.

    >>> to_text([{"role": "assistant", "content": "Final answer: 4"}])
    'Final answer: 4'
    >>> to_text([{"role": "assistant", "content": ""}, {"role": "tool", "content": "4"},
    ...          {"role": "assistant", "content": "Final answer: 4"}])
    'Final answer: 4'
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return to_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        # Chat form: the assistant turn(s); content may itself be a list of {"type": "text", "text": ...} parts.
        # A tool run's completion also holds the tools' results: the tool's words, not the model's, so not scored.
        parts = []
        for m in completion:
            if isinstance(m, dict) and m.get("role") == "tool":
                continue
            if isinstance(m, dict):
                c = m.get("content", m.get("text"))
                parts.append(c if isinstance(c, str) else to_text(c))
            else:
                parts.append(to_text(m))
        return "\n".join(p for p in parts if p)
    return str(completion)


def strip_think(text: str) -> str:
    """Remove reasoning blocks. Linear (str.find), so a huge or unclosed block cannot blow up.

    >>> strip_think("<think>maybe 41?</think>Final answer: 42")
    'Final answer: 42'
    >>> strip_think("opened in the prompt</think>42")  # chat templates often put <think> in the prompt
    '42'
    >>> strip_think("<think>ran out of tokens before answering")
    ''
    """
    close = text.find("</think>")
    if close != -1 and "<think>" not in text[:close]:
        text = text[close + len("</think>"):]
    out, pos = [], 0
    while True:
        start = text.find("<think>", pos)
        if start == -1:
            out.append(text[pos:])
            break
        out.append(text[pos:start])
        end = text.find("</think>", start)
        if end == -1:  # never closed: everything after it is unfinished reasoning, there is no answer in it
            break
        pos = end + len("</think>")
    return "".join(out).strip()


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{}``), braces balanced.

    >>> last_boxed(r"so \\boxed{1} then \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    """
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx == -1:
        return None
    brace = text.find("{", idx)
    if brace == -1 or brace - idx > 8:
        return None
    depth = 0
    for i in range(brace, min(len(text), brace + 2 * MAX_ANSWER_CHARS)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                inner = text[brace + 1:i].strip()
                return inner or None
    return None


def _clean_span(s: str) -> str:
    """An answer span: its first line, without markdown emphasis, $...$ or a trailing full stop."""
    s = s.strip().split("\n", 1)[0]
    s = _MD_RE.sub("", s).strip().rstrip(" .。!").strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$" and s.count("$") == 2:
        s = s[1:-1].strip()
    return s.rstrip(" .。!").strip()[:MAX_ANSWER_CHARS]


def find_marked_answers(text: str) -> list[str]:
    """Every non-empty "final answer:" / "answer:" span, in order (used for the answer and for contradictions)."""
    out = []
    for m in _FINAL_RE.finditer(text):
        span = _clean_span(text[m.end():])
        boxed = last_boxed(span) if "\\boxed" in span else None
        span = boxed or span
        if span:
            out.append(span)
    return out


def extract_final_answer(text) -> str | None:
    """The completion's final answer as a short string, or None if it gives none.

    >>> extract_final_answer("3 + 4 = 7, then 7 * 6 = 42.\\nFinal answer: 42")
    '42'
    >>> extract_final_answer(r"<think>it's 41</think> So $x = \\boxed{\\frac{3}{4}}$.")
    '\\\\frac{3}{4}'
    >>> extract_final_answer("The answer is 42.")
    '42'
    >>> extract_final_answer("First I got 40, but the total is 38 + 4 = 42")
    '42'
    >>> extract_final_answer("") is None
    True
    """
    t = strip_think(to_text(text))
    if not t:
        return None
    t = t[-TAIL_CHARS:]
    boxed = last_boxed(t)
    if boxed:
        return boxed[:MAX_ANSWER_CHARS]
    marked = find_marked_answers(t)
    if marked:
        return marked[-1]
    gsm = list(_GSM8K_RE.finditer(t))
    if gsm:
        span = _clean_span(t[gsm[-1].end():])
        if span:
            return span
    said = list(_ANSWER_IS_RE.finditer(t))
    if said:
        span = _clean_span(re.split(r"[,;]|\s-\s|\bbecause\b|\bsince\b", t[said[-1].end():], maxsplit=1)[0])
        if span:
            return span
    is_the = list(_IS_THE_ANSWER_RE.finditer(t))
    if is_the:
        return _clean_span(is_the[-1].group(1))
    nums = _NUM_RE.findall(t)
    if nums:
        return nums[-1]
    last_line = t.rstrip().rsplit("\n", 1)[-1]
    return _clean_span(last_line) if len(last_line) <= 100 else None


def parse_reference(reference) -> str | None:
    """The gold answer in a reference: after GSM8K's '####', inside \\boxed{}, else the whole (short) text.

    >>> parse_reference("He has 3 + 4 = 7 apples.\\n#### 7")
    '7'
    >>> parse_reference(r"so it is \\boxed{\\frac{1}{2}}")
    '\\\\frac{1}{2}'
    >>> parse_reference("  Paris ")
    'Paris'
    >>> parse_reference("   ") is None
    True
    """
    if reference is None:
        return None
    ref = str(reference).strip()
    if not ref:
        return None
    if "####" in ref:
        ref = _clean_span(ref.rsplit("####", 1)[1])
        return ref or None
    boxed = last_boxed(ref)
    if boxed:
        return boxed
    if "\n" not in ref and len(ref) <= 100:
        # "The answer is 72" (MetaMathQA-style references say so) is judged like a completion; "Paris" is itself
        said = _FINAL_RE.search(ref) or _ANSWER_IS_RE.search(ref) or _IS_THE_ANSWER_RE.search(ref)
        return (extract_final_answer(ref) if said else _clean_span(ref)) or None
    # A worked solution as the reference ("... so the answer is 42."): judge it like a completion.
    return extract_final_answer(ref)


# ---------------------------------------------------------------------------------------------- comparison


def to_number(s: str) -> Decimal | None:
    """A plain number with the usual decorations removed, else None.

    >>> to_number("$1,000.50"), to_number("50%"), to_number("-3"), to_number("2.50")
    (Decimal('1000.50'), Decimal('50'), Decimal('-3'), Decimal('2.50'))
    >>> to_number("x = 5") is None, to_number("1/2") is None
    (True, True)
    """
    s = s.strip().replace("−", "-").replace("\\$", "$").replace("\\%", "%").replace("\\!", "")
    s = s.strip("$ ").rstrip("%").strip()
    s = s.replace("\\,", "").replace(" ", "") if len(s) < 40 else s
    if not s or not re.fullmatch(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?", s) or not any(c.isdigit() for c in s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def _numbers_in(s: str) -> list[Decimal]:
    out = []
    for n in _NUM_RE.findall(s):
        d = to_number(n)
        if d is not None:
            out.append(d)
    return out


def _num_equal(a: Decimal, b: Decimal) -> bool:
    return a == b or abs(a - b) <= Decimal("1e-6") * max(Decimal(1), abs(a), abs(b))


def _norm_text(s: str) -> str:
    s = _MD_RE.sub("", s).replace("$", "")
    s = _WS_RE.sub(" ", s).strip().strip(" .。!\"'").casefold()
    return s


def _math_verify_equal(pred: str, gold: str) -> bool | None:
    """math-verify equivalence of two short LaTeX/plain expressions; None when gold does not parse."""
    gold_parsed = list(_parse_gold_math(gold[:MAX_ANSWER_CHARS]))  # verify() wants a list, not the cached tuple
    if not gold_parsed:
        return None
    from math_verify import parse, verify

    t = _timeout()
    pred_parsed = parse(_as_math(pred[:MAX_ANSWER_CHARS]), parsing_timeout=t)
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=t))


def _timeout() -> int | None:
    # math-verify's timeout is signal.alarm, which only works on the main thread (the UI and compare may score from
    # worker threads). Off the main thread the inputs are already capped to MAX_ANSWER_CHARS, which bounds the work.
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _as_math(s: str) -> str:
    return s if "$" in s or "\\(" in s or "\\[" in s else f"${s}$"


@lru_cache(maxsize=4096)
def _parse_gold_math(gold: str):
    # GRPO scores num_generations completions per prompt: the gold is parsed once per group, not per completion.
    from math_verify import parse

    return tuple(parse(_as_math(gold), parsing_timeout=_timeout()))


_NEGATION_RE = re.compile(r"\b(?:not|no|never|isn't|isn’t|wasn't|aren't)\b", re.IGNORECASE)


def _ends_with_text(pred: str, gold: str) -> bool:
    """'The capital of France is Paris' answers 'Paris' -- unless it is negated ('... is not Paris')."""
    p, g = _norm_text(pred), _norm_text(gold)
    return 0 < len(g) <= 60 and p.endswith(" " + g) and not _NEGATION_RE.search(p[: len(p) - len(g)])


def _hedged(pred: str, numbers: list[Decimal]) -> bool:
    """'42 or 40': two different candidate answers is not an answer."""
    return len({n.normalize() for n in numbers}) > 1 and bool(re.search(r"\bor\b|\beither\b|/", pred, re.I))


# A multiple-choice answer: "B", "(B)", "B)", "B.", "B: Paris", "(B) Paris", "Option B". "A car" is not the
# letter A: after the letter comes a bracket, a full stop, a colon or the end.
_CHOICE_RE = re.compile(r"^(?:(?:option|choice)\s+)?\(?([A-J])(?:\)|[.:](?!\d)|$)", re.IGNORECASE)
_YES_NO = {"yes": "yes", "true": "yes", "correct": "yes", "no": "no", "false": "no", "incorrect": "no"}


def _choice_letter(s: str) -> str | None:
    m = _CHOICE_RE.match(_MD_RE.sub("", s).strip())
    return m.group(1).upper() if m else None


def _yes_no(s: str, whole: bool) -> str | None:
    """yes/no of a boolean answer (True/False, yes/no); an answer may go on after its first word ("Yes, since")."""
    words = re.findall(r"\w+", _norm_text(s))
    if not words or (whole and len(words) > 1):
        return None
    return _YES_NO.get(words[0])


def answers_match(pred: str | None, gold: str | None) -> bool | None:
    """Compare an extracted answer with a parsed reference. None = the reference cannot be judged.

    >>> answers_match("1,000", "1000"), answers_match("$18.00", "18"), answers_match("2.50", "2.5")
    (True, True, True)
    >>> answers_match("18 apples", "18"), answers_match("18 or 20", "18"), answers_match("17", "18")
    (True, False, False)
    >>> answers_match(r"\\frac{1}{2}", "0.5"), answers_match("  PARIS ", "paris")
    (True, True)
    >>> answers_match("(B) Paris", "B"), answers_match("A car", "A"), answers_match("Yes, it is.", "True")
    (True, False, True)
    """
    if gold is None:
        return None
    if pred is None:
        return False
    if re.fullmatch(r"\(?[A-Ja-j]\)?", gold.strip()):  # a multiple-choice letter (ARC's answerKey, MMLU's index)
        letter = _choice_letter(pred)
        if letter is not None:
            return letter == _choice_letter(gold)
    gold_yes = _yes_no(gold, whole=True)
    if gold_yes is not None and (pred_yes := _yes_no(pred, whole=False)) is not None:
        return pred_yes == gold_yes
    gold_num = to_number(gold)
    if gold_num is not None:
        pred_num = to_number(pred)
        if pred_num is not None:
            return _num_equal(pred_num, gold_num)
        nums = _numbers_in(pred)
        if nums and not _LATEXY_RE.search(pred):
            # "18 apples", "x = 18", "5 + 13 = 18": the last number is the result; "18 or 20" is a hedge.
            return not _hedged(pred, nums) and _num_equal(nums[-1], gold_num)
    if _norm_text(pred) == _norm_text(gold) or (gold_num is None and _ends_with_text(pred, gold)):
        return True
    if gold_num is not None or _LATEXY_RE.search(gold) or _LATEXY_RE.search(pred):
        mv = _math_verify_equal(pred, gold)
        if mv is not None:
            return mv
    return False


def is_correct(completion, reference) -> bool | None:
    """Does the completion's final answer match the reference? None when there is no usable reference.

    >>> is_correct("<think>41?</think>Final answer: 42", "... #### 42")
    True
    >>> is_correct("I think 42, final answer: 41", "42")
    False
    >>> is_correct("Final answer: 42", None) is None
    True
    """
    gold = parse_reference(reference)
    if gold is None:
        return None
    return bool(answers_match(extract_final_answer(completion), gold))
