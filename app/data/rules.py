"""The rules of field detection, each recording its reason (app/data/detect.py applies them in order): a prompt or a
reference by its name, by position or by its values; conversations; nested answers; the context joined into the
prompt; a worked solution beside a final answer.

Owns the individual rules and their reasons. Must not decide the order they apply in, nor preference pairs
(app/data/preference.py). Only the standard library at module level.
"""

from __future__ import annotations

import re

from app.data.preference import losing
from app.data.profile import Profile, name_words, profile_column
from app.data.vocabulary import (
    AFTER_WORDS,
    CHOICE_WORDS,
    METADATA_WORDS,
    PASSAGE_WORDS,
    PROMPT_WORDS,
    REFERENCE_WORDS,
    WHOLE_PROMPT,
    WHOLE_REFERENCE,
    role_score,
)
from app.errors import DataError


def describe(p: Profile) -> str:
    return f"{p.kind}, {round(p.share * 100)}% of sampled rows filled, avg {round(p.avg_len)} chars"


REFERENCE_KINDS = {"text", "number", "bool", "list_text", "answer_dict", "messages"}


_FINAL_MARK = re.compile(r"####\s*-?[\d,.]+\s*$")
_NUMBER = re.compile(r"^\s*-?[\d,]*\.?\d+\s*$")


def _answer_values(p: Profile) -> str | None:
    """What makes a column's values answers ('short numbers', 'answers ending in #### N'), or None."""
    values = [v for v in p.sample if not isinstance(v, bool)]
    if len(values) < 2 or p.share < 0.8:
        return None
    texts = [str(v) for v in values]
    if p.kind == "text" and all(_FINAL_MARK.search(t) for t in texts):
        return "answers ending in #### N"
    if p.kind not in ("number", "text") or p.avg_len > 16 or not all(_NUMBER.match(t) for t in texts):
        return None
    nums = [float(t.replace(",", "")) for t in texts]
    if {b - a for a, b in zip(nums, nums[1:])} == {1.0}:  # 1, 2, 3, ...: a row id, not an answer
        return None
    return "short numbers"


def _numbered_twin(a: list[str], b: list[str]) -> bool:
    """'sentence1' / 'sentence2', 'question1' / 'question2': the same words apart from digits."""
    return a != b and [w for w in a if not w.isdigit()] == [w for w in b if not w.isdigit()]


class Detector:
    """The individual rules, each recording its reason."""

    def __init__(self, rows: list[dict], columns: list[str]):
        self.columns = columns
        self.order = {c: i for i, c in enumerate(columns)}
        self.prof = {c: profile_column(c, [r.get(c) if isinstance(r, dict) else None for r in rows])
                     for c in columns}
        self.ps = {c: role_score(p.words, PROMPT_WORDS, WHOLE_PROMPT) for c, p in self.prof.items()}
        self.rs = {c: role_score(p.words, REFERENCE_WORDS, WHOLE_REFERENCE) for c, p in self.prof.items()}
        self.reasons: dict[str, str] = {}
        self.named_refs: list[str] = []
        letters = [c for c in columns if len(c) == 1 and c.lower() in "abcdefgh"]
        # MMLU-as-CSV: columns A, B, C, D are the options, so 'A' is not an abbreviation of 'answer'.
        self.option_letters = letters if len(letters) >= 3 else []

    def _meta(self, c: str) -> bool:
        return bool(set(self.prof[c].words) & METADATA_WORDS)

    def _prompt_ok(self, c: str, strong: bool) -> bool:
        p = self.prof[c]
        if p.kind == "messages":  # TRL conversational prompt: [{"role": "user", ...}] without an answer turn
            return not p.has_assistant
        # A strong name ('instruction', 'question') is trusted even when every row repeats it or it has no spaces
        # ('12*7'); a weak one ('text', 'source') must look like prose, not a category or an id.
        return p.kind == "text" and (strong or (not p.id_like and not p.categorical))

    def named_prompt(self, exclude: set) -> str | None:
        cands = [c for c in self.columns if c not in exclude and self.ps[c][0] > self.rs[c][0]
                 and not losing(self.prof[c].words)
                 and c not in self.option_letters and self._prompt_ok(c, self.ps[c][0] >= 80)]
        if not cands:
            return None
        best = min(cands, key=lambda c: (-self.ps[c][0], self.order[c]))
        self.reasons["prompt_field"] = f"name word '{self.ps[best][1]}' means prompt ({describe(self.prof[best])})"
        return best

    def _ref_ok(self, c: str) -> bool:
        p = self.prof[c]
        if losing(p.words):  # the worse or losing answer is never what the model should learn
            return False
        if p.kind == "bool":
            return self.rs[c][1] in ("answer", "label", "labels", "a", "correct", "decision")
        return p.kind in REFERENCE_KINDS and c not in self.option_letters

    def named_reference(self, exclude: set) -> str | None:
        # Highest name score first; ties go to the shorter values (a final answer over a worked solution).
        self.named_refs = sorted(
            (c for c in self.columns if c not in exclude and self.rs[c][0] > self.ps[c][0] and self._ref_ok(c)),
            key=lambda c: (-self.rs[c][0], self.prof[c].avg_len, self.order[c]))
        if not self.named_refs:
            return None
        best = self.named_refs[0]
        longer = [c for c in self.named_refs[1:] if self.prof[c].kind == "text"
                  and self.prof[c].avg_len > self.prof[best].avg_len * 1.5]
        extra = (f"; preferred over '{longer[0]}' (longer, a worked solution): the reward needs the final answer"
                 if longer else "")
        self.reasons["reference_field"] = (f"name word '{self.rs[best][1]}' means reference "
                                           f"({describe(self.prof[best])}){extra}")
        return best

    def conversation(self, exclude: set) -> str | None:
        cands = [c for c in self.columns if c not in exclude and self.prof[c].kind == "messages"
                 and self.prof[c].has_assistant and not self._meta(c) and self.rs[c][1] != "chosen"]
        chatty = {"messages", "conversations", "conversation", "chat", "dialog", "dialogue", "turns"}
        cands.sort(key=lambda c: (0 if set(self.prof[c].words) & chatty else 1, self.order[c]))
        return cands[0] if cands else None

    def prose_prompt(self, exclude: set) -> str | None:
        """The longest prose column outside ``exclude`` with no role in its name (Stanford SHP's 'history' beside
        its two answers), or None."""
        prose = [c for c in self.columns if c not in exclude and self._prompt_ok(c, False) and self.rs[c][0] == 0
                 and not self._meta(c) and self.prof[c].kind == "text" and not losing(self.prof[c].words)]
        if not prose:
            return None
        best = max(prose, key=lambda c: (self.prof[c].avg_len, -self.order[c]))
        self.reasons["prompt_field"] = f"the longest prose column besides the answers ({describe(self.prof[best])})"
        return best

    def prompt_by_value(self, reference: str | None, reference_overridden: bool) -> tuple[str, str | None]:
        prose = [c for c in self.columns if c != reference and self._prompt_ok(c, False) and self.rs[c][0] == 0
                 and not self._meta(c) and self.prof[c].kind == "text" and not losing(self.prof[c].words)]
        if not prose and reference and not reference_overridden and self.prof[reference].kind == "text":
            # The only prose is "reference"-named (e.g. chosen/rejected transcripts): it is text to train on.
            self.reasons["prompt_field"] = f"the only prose column; used as the text ({describe(self.prof[reference])})"
            self.reasons.pop("reference_field", None)
            return reference, None
        if not prose:
            prose = [c for c in self.columns if c != reference and self.prof[c].kind == "text" and not self._meta(c)
                     and not losing(self.prof[c].words)]
        if not prose:
            kinds = ", ".join(f"{c} ({self.prof[c].kind})" for c in self.columns)
            raise DataError(f"no text-like column to use as the prompt (columns: {kinds}); "
                            "pass --prompt-field NAME or a dataset with a text column")
        if reference is None and len(prose) >= 2:
            # Two unnamed text columns: datasets put the input first and the output second.
            p, r = prose[0], prose[1]
            self.reasons["prompt_field"] = f"no known prompt name; first text column ({describe(self.prof[p])})"
            self.reasons["reference_field"] = f"no known reference name; second text column ({describe(self.prof[r])})"
            return p, r
        p = max(prose, key=lambda c: (self.prof[c].avg_len, -self.order[c]))
        self.reasons["prompt_field"] = f"no known prompt name; longest text column ({describe(self.prof[p])})"
        return p, reference

    def reference_by_position(self, prompt: str) -> str | None:
        """A named prompt ('prompt', 'question') followed by one unnamed prose column ('story'): that is the answer.
        Not for generic prompt names ('text' + 'title' is a text corpus with metadata)."""
        if self.ps[prompt][1] in ("text", "content", "body", "document", "article", "x") or self.ps[prompt][0] == 0:
            return None
        rest = [c for c in self.columns if self.order[c] > self.order[prompt] and self.prof[c].kind == "text"
                and self.ps[c][0] == 0 and self.rs[c][0] == 0 and not self._meta(c) and not self.prof[c].id_like
                and not losing(self.prof[c].words)
                and not self.prof[c].categorical and self.prof[c].avg_len >= 20
                and not set(self.prof[c].words) & (PASSAGE_WORDS | AFTER_WORDS)]
        if len(rest) != 1:
            return None
        self.reasons["reference_field"] = (f"no known reference name; the only other prose column, after the prompt "
                                           f"({describe(self.prof[rest[0]])})")
        return rest[0]

    def reference_by_value(self, prompt: str) -> str | None:
        """In any language ('Frage' / 'Antwort'): beside a question-like prompt, the one column of short numbers or
        of GSM8K-style '... #### N' answers is the reference, whatever its header says."""
        if self.prof[prompt].kind != "text" or self.prof[prompt].avg_len < 15:
            return None
        found = {c: why for c in self.columns if c != prompt and not self._meta(c) and c not in self.option_letters
                 and not losing(self.prof[c].words) and (why := _answer_values(self.prof[c]))}
        if len(found) != 1:
            return None
        (column, why), = found.items()
        self.reasons["reference_field"] = f"no known reference name; its values are answers ({why}) beside the prompt"
        return column

    def nested_reference(self, exclude: set) -> str | None:
        """verl-style {"reward_model": {"ground_truth": ...}}: a dict column with an answer-named key."""
        best, best_score = None, 0
        for c in self.columns:
            if c in exclude or self.prof[c].kind not in ("dict", "answer_dict"):
                continue
            keys = {k for r in self.prof[c].sample if isinstance(r, dict) for k in r}
            for k in keys:
                score = role_score(name_words(k), REFERENCE_WORDS, WHOLE_REFERENCE)[0]
                if score > best_score:
                    best, best_score, best_key = c, score, k
        if best:
            self.reasons["reference_field"] = f"nested: the '{best_key}' key inside '{best}'"
        return best

    def contexts(self, prompt: str, used: set) -> list[str]:
        """Columns joined into the prompt: Alpaca input, Dolly/SQuAD context, ARC choices, option columns."""
        out = []
        p_words = self.prof[prompt].words
        for c in self.columns:
            p = self.prof[c]
            words = set(p.words)
            if c in used or self._meta(c) or p.kind not in ("text", "list_text", "choices", "answer_dict", "dict"):
                continue
            twin = p.kind == "text" and _numbered_twin(p_words, p.words)
            if not (words & (PASSAGE_WORDS | AFTER_WORDS) or twin or c in self.option_letters):
                continue
            if words & {"input", "inputs"} and self.ps[prompt][1] in ("input", "inputs"):
                continue
            if self.ps[prompt][1] in words and not twin:  # 'ctx_a' next to prompt 'ctx' repeats part of it
                continue
            out.append(c)
        if out:
            kind = {c: "answer options" if set(self.prof[c].words) & CHOICE_WORDS or c in self.option_letters
                    else "context" for c in out}
            self.reasons["context_fields"] = "joined into the prompt: " + ", ".join(f"'{c}' ({kind[c]})" for c in out)
        return out

    def solution(self, reference: str) -> str | None:
        longer = [c for c in self.named_refs if c != reference and self.prof[c].kind == "text"
                  and self.rs[c][1] in ("solution", "solutions", "output", "response", "completion", "sol")
                  and self.prof[c].avg_len > self.prof[reference].avg_len * 1.5]
        return longer[0] if longer else None
