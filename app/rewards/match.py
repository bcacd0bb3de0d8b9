"""How the reference component compares an answer with its reference (``reward.reference_match``), and what
``auto`` picks from a reference column.

    exact    the final answer equals the reference as text (case, spaces, markdown, end punctuation ignored);
             a multiple-choice letter or a yes/no answer is read as such
    numeric  numbers as numbers ("1,000" = "1000.0"), anything else as exact text (answer.answers_match)
    math     math-verify equivalence ("1/2" = "0.5" = "\\frac{1}{2}"); numbers as numeric
    overlap  ROUGE-L F1 (Google's rouge-score: the longest common subsequence of words) between the answer and the
             reference, 0..1: summaries, rewrites, explanations, support answers
    json     the answer's JSON (app/rewards/json_answer.json_value) against the reference's: 1 when equal, else the
             share of the reference's fields (an object's keys, a list's items) the answer has with equal values

``auto`` reads up to ``SAMPLE`` references once per run (the plan records the choice and why): mostly JSON objects
or lists -> json; mostly numbers -> numeric; numbers and LaTeX -> math; short answers (a line of at most
``SHORT_WORDS`` words) -> exact; sentences, code and longer -> overlap. A reference that marks its answer ("#### 42",
"\\boxed{}") counts as that answer; JSON, code and text of several lines are never read as LaTeX (their braces and
slashes are not math). In every mode but overlap, an answer that is its reference, whole, scores 1.
"""

from __future__ import annotations

import json
import re
from statistics import median

from app.rewards import answer as A
from app.rewards import json_answer as J

SAMPLE = 200  # references auto reads
SHORT_WORDS = 5  # a reference of at most this many words (median) is a short answer
MOSTLY = 0.8  # the share of references that decides a kind
OVERLAP_CHARS = 8000  # the overlap measure reads at most this much of an answer and of a reference

# A word: a run of letters and digits, or one CJK character (those scripts do not put spaces between words).
_WORD_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+")


def _raw(reference) -> str:
    return "" if reference is None else str(reference).strip()


def _answer_of(reference) -> str | None:
    """The text a reference stands for: its marked answer ("#### 42", \\boxed{}), the number a sentence states as
    its answer or ends with ("20 - 16 = 4. So the answer is 4.": 4), or the reference itself."""
    raw = _raw(reference)
    if not raw:
        return None
    if "####" in raw or A.last_boxed(raw):
        return A.parse_reference(raw)
    return stated_number(raw) or raw


# A sentence's last number, with nothing but closing punctuation after it ("... = 4.", "... is 1,200!")
_TRAILING_NUMBER_RE = re.compile(r"(" + A._NUM_RE.pattern + r")[\s.!)\]*_`'\"]*$")


def stated_number(raw: str) -> str | None:
    """The number a prose reference gives as its answer: what follows its "the answer is" / "Final answer:", or the
    number it ends with; None for a reference that is itself a number, or states none.

    >>> stated_number("20 - 16 = 4. So the answer is 4."), stated_number("She pays $1,200 in total.")
    ('4', None)
    >>> stated_number("3 + 4 = 7"), stated_number("42"), stated_number("The answer is Paris.")
    ('7', None, None)
    >>> stated_number("The council voted on the budget after a long debate and the total spending rose to 1,200.")
    """
    if A.to_number(raw) is not None or not re.search(r"[^\W\d_]|[-+*/=]", raw) or _CODE_RE.search(raw):
        return None
    if A._FINAL_RE.search(raw) or A._ANSWER_IS_RE.search(raw) or A._IS_THE_ANSWER_RE.search(raw):
        said = A.extract_final_answer(raw)
        return said if said and A.to_number(said) is not None else None
    # a worked line ("3 + 4 = 7") or a short answer sentence; a long free text that happens to end in a number
    # (a summary's "... rose to 1,200.") stays free text
    if "=" not in raw and len(_WORD_RE.findall(raw)) > 3 * SHORT_WORDS:
        return None
    m = _TRAILING_NUMBER_RE.search(raw[-80:])
    return m.group(1) if m else None


def choose(references) -> tuple[str, str]:
    """(mode, why) for a reference column: what ``reward.reference_match: auto`` compares with.

    >>> choose(["#### 18", "#### 1,000", "42"])[0]
    'numeric'
    >>> choose(["Paris", "Blue whale", "1969"])[0]
    'exact'
    >>> choose(["The treaty ended the war and redrew the borders of the region.", "Cells divide by mitosis."])[0]
    'overlap'
    """
    values = [v for v in (_answer_of(r) for r in list(references)[:SAMPLE]) if v]
    if not values:
        return "numeric", "no reference to read: answers are compared as numbers, else as text"
    n = len(values)
    structured = sum(J.is_json_structure(v) for v in values)
    if structured >= MOSTLY * n:
        return "json", (f"{structured} of {n} references read are JSON objects or lists: an answer's JSON is "
                        "compared with the reference's, field by field")
    numbers = sum(A.to_number(v) is not None for v in values)
    if numbers >= MOSTLY * n:
        stated = sum(stated_number(_raw(r)) is not None for r in list(references)[:SAMPLE])
        said = (f" ({stated} of them the number a sentence states as its answer or ends with: that number is the "
                "answer compared)") if stated else ""
        return "numeric", f"{numbers} of {n} references read are numbers{said}"
    latex = sum(_latex(v) for v in values)
    if numbers + latex >= MOSTLY * n and latex:
        return "math", f"{latex} of {n} references read are LaTeX or fractions and {numbers} numbers"
    words = median(len(_WORD_RE.findall(v)) for v in values)
    lines = sum("\n" not in v for v in values)
    if words <= SHORT_WORDS and lines >= MOSTLY * n:
        return "exact", f"short answers: the references read have a median of {words:g} word(s)"
    return "overlap", (f"free text: the references read have a median of {words:g} words, so an answer is scored by "
                       "its ROUGE-L overlap with the reference (exact matching would score nearly every answer 0)")


def _latex(v: str) -> bool:
    """A reference that reads as a LaTeX expression: one short line, not a number, not JSON, not code."""
    return (A.to_number(v) is None and "\n" not in v.strip() and len(v) <= A.MAX_ANSWER_CHARS
            and not J.is_json_structure(v) and bool(A._LATEXY_RE.search(v)) and not _CODE_RE.search(v))


_CODE_RE = re.compile(r"[;=]\s*$|\b(def|return|function|class|import|var|let|const|SELECT|FROM)\b|=>|==|\(\)")


def choose_for(rows, reference_of) -> tuple[str, str]:
    """``choose`` on the first SAMPLE rows of a dataset, each row's reference read by ``reference_of(row)``: what a
    run's plan and `inspect` decide, the same way."""
    return choose(reference_of(rows[i]) for i in range(min(len(rows), SAMPLE)))


# ------------------------------------------------------------------------------------------------------ compare


def _exact(pred: str | None, gold: str) -> bool:
    if pred is None:
        return False
    if re.fullmatch(r"\(?[A-Ja-j]\)?", gold.strip()) and (letter := A._choice_letter(pred)) is not None:
        return letter == A._choice_letter(gold)
    gold_yes = A._yes_no(gold, whole=True)
    if gold_yes is not None and (pred_yes := A._yes_no(pred, whole=False)) is not None:
        return pred_yes == gold_yes
    return A._norm_text(pred) == A._norm_text(gold)


def _math(pred: str | None, gold: str) -> bool | None:
    if pred is None:
        return False
    if A.to_number(gold) is not None:
        return A.answers_match(pred, gold)
    mv = A._math_verify_equal(pred, gold)
    return A.answers_match(pred, gold) if mv is None else mv


class _Words:
    """rouge-score's tokenizer interface (``tokenize(text)``): words of any script (rouge-score's own keeps a-z and
    0-9 only, so an answer in another language would overlap with nothing), English ones Porter-stemmed as
    rouge-score does."""

    def __init__(self):
        from nltk.stem import porter  # rouge-score's own dependency and stemmer

        self._stem = porter.PorterStemmer().stem

    def tokenize(self, text: str) -> list[str]:
        words = _WORD_RE.findall(text[:OVERLAP_CHARS].casefold())
        return [self._stem(w) if len(w) > 3 and w.isascii() and w.isalpha() else w for w in words]


_SCORER = None


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1 of two texts, 0..1 (rouge-score's RougeScorer with a tokenizer for every script).

    >>> round(rouge_l("The cat sat on the mat.", "A cat was sitting on the mat"), 3)  # as rouge-score's own
    0.615
    >>> rouge_l("Le chat dort.", "Le chat dort")
    1.0
    """
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer

        _SCORER = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Words())
    return float(_SCORER.score(reference, prediction)["rougeL"].fmeasure)


def _overlap_text(text: str) -> str:
    """The part of a completion compared with a free-text reference: what follows its last "Final answer:" when it
    marks one, else its whole visible text."""
    visible = A.strip_think(text)
    marked = A._FINAL_RE.search(visible[-A.TAIL_CHARS:]) and list(A._FINAL_RE.finditer(visible))
    return visible[marked[-1].end():].strip() if marked else visible


def score(mode: str, text: str, reference) -> tuple[float | None, str]:
    """(value, why) of one completion's text against its reference under ``mode`` (not auto: the caller resolved
    it, with ``choose`` on the column, or on this one reference)."""
    if mode == "overlap":
        ref = _raw(reference)
        if "####" in ref:  # a worked solution with a marked answer: the words before the mark are the reference
            ref = ref.rsplit("####", 1)[0].strip() or ref
        if not ref:
            return None, "no reference"
        pred = _overlap_text(text)
        if not pred:
            return 0.0, "empty answer"
        f1 = rouge_l(pred, ref)
        return round(f1, 4), f"ROUGE-L F1 {f1:.2f} with the reference ({len(ref)} chars)"
    raw = _raw(reference)
    if mode == "json":
        return _json_match(text, raw)
    if raw and A._norm_text(_overlap_text(A.to_text(text))) == A._norm_text(raw):
        return 1.0, "the answer is the reference"
    gold = A.parse_reference(reference)
    if mode in ("numeric", "math") and (gold is None or A.to_number(gold) is None):
        gold = stated_number(raw) or gold  # "... = 4. So the answer is 4." is 4, as choose read it
    if gold is None:
        return None, "no reference"
    pred = A.extract_final_answer(text)
    ok = _exact(pred, gold) if mode == "exact" else _math(pred, gold) if mode == "math" else A.answers_match(pred, gold)
    if ok is None:
        return None, f"reference {gold!r} cannot be judged"
    verb = "matches" if ok else "does not match"
    how = "" if mode == "numeric" else f" ({mode})"
    return (1.0 if ok else 0.0), f"answer {pred!r} {verb} reference {gold!r}{how}"


def _same(a, b) -> bool:
    """Two JSON values equal as a reader would take them: numbers as numbers, text without case or outer spaces."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    if isinstance(a, str) and isinstance(b, str):
        return A._norm_text(a) == A._norm_text(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _json_match(text: str, reference: str) -> tuple[float | None, str]:
    """The json mode: the answer's JSON against the reference's (1 when equal; else the share of the reference's
    fields the answer has with equal values)."""
    if not reference:
        return None, "no reference"
    try:
        gold = json.loads(reference)
    except ValueError:
        found, value = J.json_value(reference)
        if not found:
            return None, "the reference is not JSON"
        gold = value
    found, pred = J.json_value(text)
    if not found:
        return 0.0, "no JSON in the answer"
    if _same(pred, gold):
        return 1.0, "the answer's JSON equals the reference"
    if isinstance(gold, dict) and isinstance(pred, dict) and gold:
        right = [k for k in gold if k in pred and _same(pred[k], gold[k])]
        wrong = [k for k in gold if k not in right]
        return round(len(right) / len(gold), 4), (f"{len(right)} of {len(gold)} fields match"
                                                  + (f" (not: {', '.join(map(str, wrong[:5]))})" if wrong else ""))
    if isinstance(gold, list) and isinstance(pred, list) and gold:
        left, hits = list(pred), 0
        for g in gold:
            i = next((i for i, p in enumerate(left) if _same(p, g)), None)
            if i is not None:
                hits += 1
                left.pop(i)
        share = hits / max(len(gold), len(pred))
        return round(share, 4), f"{hits} of {len(gold)} items match ({len(pred)} in the answer)"
    return 0.0, "the answer's JSON differs from the reference"


# What "correct" means in a comparison's accuracy under each mode (the graded modes need a line to cross).
OVERLAP_CORRECT = 0.5  # ROUGE-L F1 with the reference at or above this: the answer says what the reference says
CORRECT_WHEN = {
    "numeric": "final answer = reference (as numbers)",
    "exact": "final answer = reference (as text)",
    "math": "final answer = reference (math-verify)",
    "overlap": f"ROUGE-L F1 with the reference >= {OVERLAP_CORRECT}",
    "json": "the answer's JSON = the reference's",
}


def resolved(mode: str | None, reference) -> str:
    """The mode a comparison judges one reference with: the run's, or ``auto``'s choice for that reference."""
    return choose([reference])[0] if mode in (None, "auto") else mode


def correct(mode: str | None, text: str, reference) -> bool | None:
    """Whether an answer is right under the run's reference match (the comparison's accuracy); None without a
    reference. The binary modes: their score is 1; overlap: ROUGE-L F1 >= OVERLAP_CORRECT; json: equal.

    >>> correct("overlap", "Rain closed two schools and flooded streets.", "Heavy rain closed two schools and flooded"
    ...         " several streets.")
    True
    >>> correct("numeric", "Final answer: 41", "#### 42")
    False
    """
    if _raw(reference) == "":
        return None
    mode = resolved(mode, reference)
    value, _ = score(mode, text, reference)
    if value is None:
        return None
    return value >= (OVERLAP_CORRECT if mode == "overlap" else 1.0)
