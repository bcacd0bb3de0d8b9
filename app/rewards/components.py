"""The shaped reward's components, each a TRL reward function.

Every component is a module-level callable class (picklable) whose instances carry ``__name__`` = the component
name, because TRL names the reward column ``getattr(func, "__name__", ...)`` and logs ``rewards/<name>/mean``.
Ranges are chosen so a weighted sum reads naturally: bonuses are in [0, 1], penalties in [-1, 0].

Containment: a component that raises on one sample gives that sample ``None``. TRL 1.16 turns None into NaN,
sums components with ``nansum`` (so it counts as 0 for that component, the neutral value of every component here)
and only marks a completion unscorable -- advantage 0 -- when *every* component is NaN. Returning None rather
than 0.0 keeps the failure out of ``rewards/<name>/mean`` (nanmean) instead of dragging the logged mean down, and
training carries on either way.
"""

from __future__ import annotations

import re
import zlib

from app.rewards import answer as A
from app.rewards import match
from app.run.counts import RewardErrors

SCAN_CHARS = 4000  # boilerplate is looked for in the first and last SCAN_CHARS characters
REPEAT_SCAN_CHARS = 20000

class Component:
    """Base: ``score(text, reference) -> (value | None, why)``; ``__call__`` is the TRL batch interface."""

    name = "component"
    reads_prompt = False  # score(text, reference, prompt): the component reads the task too (the judge)

    def __init__(self):
        self.__name__ = self.name  # TRL's column name; an instance attribute so it survives pickling
        self.errors = RewardErrors()  # its own; a run's reward functions are built with the run's (count_in)

    def count_in(self, counts) -> None:
        """A fresh component made for a run counts its failures in the run's counts (app/run/counts.RunCounts)."""
        self.errors = counts.reward_errors

    @classmethod
    def from_config(cls, reward_cfg) -> "Component":
        """An instance set up from a RewardConfig (most components take no settings)."""
        return cls()

    def score(self, text: str, reference: str | None) -> tuple[float | None, str]:
        raise NotImplementedError

    def safe_score(self, completion, reference, prompt=None) -> tuple[float | None, str]:
        """(value | None, why) of one completion; ``prompt`` is for the components that read the task (the judge)."""
        try:
            value, why = self.score(A.to_text(completion), reference, prompt) if self.reads_prompt else \
                self.score(A.to_text(completion), reference)
            return (None if value is None else float(value)), why
        except Exception as e:  # noqa: BLE001 - one bad sample must never kill a training run
            self.errors.add(self.name, e)
            return None, f"error: {type(e).__name__}"
        except BaseException as e:  # math-verify's TimeoutException derives from BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self.errors.add(self.name, e)
            return None, f"error: {type(e).__name__}"

    def __call__(self, completions, **kwargs) -> list[float | None]:
        refs = kwargs.get("reference")
        if not isinstance(refs, (list, tuple)) or len(refs) != len(completions):
            refs = [None] * len(completions)
        return [self.safe_score(c, r)[0] for c, r in zip(completions, refs)]

    def __repr__(self) -> str:
        return f"<reward {self.name}>"


# --------------------------------------------------------------------------------------------------- length


def repetition(text: str) -> float:
    """0 = no repetition .. 1 = a degenerate loop. zlib sees repeats of any span (no tokenizer, linear time);
    duplicated lines catch looser loops that still compress poorly.

    >>> repetition("The answer is 42. " * 30) > 0.9
    True
    >>> repetition("Tom has 3 apples and buys 4 more, so he has 3 + 4 = 7. Final answer: 7")
    0.0
    """
    t = text[:REPEAT_SCAN_CHARS]
    rep = 0.0
    if len(t) >= 200:
        raw = t.encode("utf-8", "replace")
        ratio = len(zlib.compress(raw, 6)) / len(raw)
        rep = min(1.0, max(0.0, (0.35 - ratio) / 0.2))  # prose compresses to ~0.45-0.7; loops to < 0.15
    lines = [ln.strip() for ln in t.split("\n") if len(ln.strip()) >= 8]
    if len(lines) >= 3:
        dup = 1 - len(set(lines)) / len(lines)
        rep = max(rep, min(1.0, dup * 1.5))
    return round(rep, 4)


class LengthReward(Component):
    """Rewards compact, direct answers. Visible text only (``<think>`` is not counted: reasoning models need it).

    0 for nothing, a gentle slope to -0.1 at ``length_target`` characters, then down to -0.6 at ``length_limit``;
    repeated text costs up to another -0.5; an empty answer is -1 (it is not compact, it is missing).

    >>> r = LengthReward(400, 2000)
    >>> r(["Final answer: 7", "", "Final answer: 7. " * 40])
    [-0.0037, -1.0, -0.6872]
    """

    name = "length"

    @classmethod
    def from_config(cls, reward_cfg) -> "LengthReward":
        return cls(reward_cfg.length_target, reward_cfg.length_limit)

    def __init__(self, target: int = 400, limit: int = 2000):
        super().__init__()
        self.target, self.limit = int(target), max(int(limit), int(target) + 1)

    def score(self, text, reference):
        visible = A.strip_think(text)
        if not visible:
            return -1.0, "empty answer"
        n = len(visible)
        short = 0.1 * min(n, self.target) / self.target
        over = 0.5 * min(1.0, max(0.0, (n - self.target) / (self.limit - self.target)))
        rep = repetition(visible)
        value = max(-1.0, -(short + over + 0.5 * rep))
        why = f"{n} chars (target {self.target}, limit {self.limit})"
        if rep > 0:
            why += f", repetition {rep:.2f}"
        return round(value, 4), why


# --------------------------------------------------------------------------------------------------- format


class FormatReward(Component):
    """Rewards an explicit final answer: 1.0 for a "Final answer: X" / "Answer: X" line or ``\\boxed{X}`` at the
    end; 0.5 for the weaker "the answer is X", for a marked answer followed by more text, or for two marked answers
    that disagree; 0 otherwise.

    >>> f = FormatReward()
    >>> f(["Work...\\nFinal answer: 42", "So the answer is 42.", "42", "Answer: 40. Hmm, wait.\\nAnswer: 42"])
    [1.0, 0.5, 0.0, 0.5]
    """

    name = "format"

    def score(self, text, reference):
        t = A.strip_think(text)[-A.TAIL_CHARS:]
        if not t:
            return 0.0, "no answer"
        marked = A.find_marked_answers(t)
        boxed = A.last_boxed(t)
        if not marked and not boxed:
            if A._ANSWER_IS_RE.search(t) or A._IS_THE_ANSWER_RE.search(t) or A._GSM8K_RE.search(t):
                return 0.5, "'the answer is ...' or '#### ...' (use 'Final answer: ...' for the full bonus)"
            return 0.0, "no 'Final answer:' line or \\boxed{}"
        finals = {_canon(x) for x in marked + ([boxed] if boxed else [])}
        if len(finals) > 1:
            return 0.5, f"{len(finals)} different final answers"
        last = max([m.start() for m in A._FINAL_RE.finditer(t)] + [t.rfind("\\boxed"), t.rfind("\\fbox")])
        eol = t.find("\n", last)
        trailing = t[eol:].strip() if eol != -1 else ""
        if len(trailing) > 80:
            return 0.5, f"final answer followed by {len(trailing)} more chars"
        return 1.0, "final answer marked" + (" (\\boxed{})" if boxed and not marked else "")


def _canon(s: str) -> str:
    n = A.to_number(s)
    return str(n.normalize()) if n is not None else A._norm_text(s)


# ------------------------------------------------------------------------------------------------ reference


class ReferenceReward(Component):
    """How well the answer matches the reference, the way ``reward.reference_match`` says (app/rewards/match.py):
    exact, numeric and math score 1.0 or 0.0; overlap scores the ROUGE-L F1 (0..1); auto decides per reference
    (a run decides once for its column, in the plan). None when the row has no usable reference (TRL then skips it).

    >>> ReferenceReward()(["Final answer: 1,000", "Final answer: 999", "42"], reference=["#### 1000", "1000", None])
    [1.0, 0.0, None]
    >>> ReferenceReward("overlap")(["Final answer: the cat sat on the mat"], reference=["The cat sat on the mat."])
    [1.0]
    """

    name = "reference"

    @classmethod
    def from_config(cls, reward_cfg) -> "ReferenceReward":
        return cls(reward_cfg.reference_match)

    def __init__(self, mode: str = "auto"):
        super().__init__()
        self.mode = mode

    def score(self, text, reference):
        mode = self.mode if self.mode != "auto" else match.choose([reference])[0]
        return match.score(mode, text, reference)


# ---------------------------------------------------------------------------------------------- boilerplate

# (penalty, phrases). Refusals and AI disclaimers are the strongest signal; hedges and chat filler are milder.
_BOILERPLATE = [
    (1.0, ["as an ai", "as a language model", "as an artificial intelligence", "i am an ai", "i'm an ai",
           "i'm just an ai", "i am just an ai", "i cannot help", "i can't help", "i cannot assist", "i can't assist",
           "i'm unable to", "i am unable to", "i'm not able to", "i am not able to", "i cannot provide",
           "i can't provide", "i cannot answer", "i can't answer", "i won't be able to", "i must decline",
           "i'm sorry, but", "i am sorry, but", "i apologize, but", "i do not have the ability",
           "i don't have the ability", "i cannot do that", "i can't do that"]),
    (0.5, ["i'm not sure", "i am not sure", "i'm not certain", "i am not certain", "i don't know",
           "i do not know", "it is difficult to say", "it's difficult to say", "it is hard to say", "it's hard to say",
           "consult a professional", "consult a qualified", "seek professional", "i cannot be certain",
           "i can't be certain", "i cannot be sure", "i can't be sure"]),
    (0.25, ["i hope this helps", "feel free to", "let me know if", "great question", "it's important to note",
            "it is important to note", "please note that", "happy to help", "glad to help", "i think",
            "i believe", "probably", "perhaps", "maybe"]),
]
_BP_PENALTY = {p: w for w, phrases in _BOILERPLATE for p in phrases}
# One alternation of literal phrases: the regex engine cannot backtrack catastrophically on it.
_BP_RE = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in sorted(_BP_PENALTY, key=len, reverse=True)) + r")\b")


class BoilerplateReward(Component):
    """Penalises refusals, AI disclaimers, hedging and chat filler: each distinct phrase costs 1.0 / 0.5 / 0.25,
    capped at -1. Looks at the visible text (``<think>`` stripped), its first and last 4000 characters.

    >>> b = BoilerplateReward()
    >>> b(["Final answer: 42", "As an AI language model, I cannot help with that.", "I think it is maybe 42"])
    [0.0, -1.0, -0.5]
    """

    name = "boilerplate"

    def score(self, text, reference):
        t = A.strip_think(text)
        if len(t) > 2 * SCAN_CHARS:
            t = t[:SCAN_CHARS] + "\n" + t[-SCAN_CHARS:]
        t = t.lower().replace("\u2019", "'").replace("can not", "cannot")
        found = sorted(set(_BP_RE.findall(t)))
        if not found:
            return 0.0, "no boilerplate"
        value = -min(1.0, sum(_BP_PENALTY[p] for p in found))
        return value, "found: " + ", ".join(repr(p) for p in found[:5])


# ------------------------------------------------------------------------------------------------- accuracy


class AccuracyReward(Component):
    """The strict math accuracy reward of the "LoRA Without Regret" guide: strip ``<think>``, parse the gold with
    math-verify (boxed first, anchors optional), parse the answer requiring an anchor or ``\\boxed{}`` and
    well-formed LaTeX, 1.0 if they verify, 0.0 if not, None when the gold does not parse (row skipped).
    GSM8K golds ("#### 42") are reduced to the number first so they parse.

    >>> AccuracyReward()([r"so \\boxed{\\frac{1}{2}}", r"\\boxed{3}", "Final answer: 42"], reference=["0.5", "#### 4", None])
    [1.0, 0.0, None]
    """

    name = "accuracy"

    def score(self, text, reference):
        from math_verify import (
            LatexExtractionConfig,
            LatexNormalizationConfig,
            parse,
            verify,
        )

        gold = A.parse_reference(reference)
        if gold is None:
            return None, "no reference"
        t = A._timeout()
        gold_parsed = parse(f"${gold[:A.MAX_ANSWER_CHARS]}$", parsing_timeout=t, extraction_config=[
            LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=True)])
        if not gold_parsed:
            return None, f"reference {gold!r} does not parse"
        content = A.strip_think(text)[-A.TAIL_CHARS:]
        pred_parsed = parse(content, parsing_timeout=t, extraction_mode="first_match", extraction_config=[
            LatexExtractionConfig(
                boxed_match_priority=0, try_extract_without_anchor=False,
                normalization_config=LatexNormalizationConfig(
                    basic_latex=True, units=True, malformed_operators=False, nits=False, boxed=True))])
        ok = bool(verify(gold_parsed, pred_parsed, timeout_seconds=t))
        return (1.0 if ok else 0.0), f"math-verify: {'equivalent' if ok else 'not equivalent'} to {gold!r}"
