"""Which column is the prompt, which is the reference: detected from names *and* values, with a reason for each.

Why this exists: other tools either want a hand-written column map or guess by substring (and then match "text"
inside "context"). Here a column name is split into words (snake_case, kebab-case, spaces, camelCase) and each word
is looked up in small synonym tables, so "context" is never "text" and "answerKey" is an answer. Values decide the
rest: a categorical "source" column is metadata, not a prompt; a list of {role, content} dicts is a conversation.

Only a bounded sample of rows is looked at, so the cost does not grow with the dataset. Only the standard library is
imported here (the CLI imports this package for --help).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from app.data.preference import with_preference
from app.data.profile import (
    Profile,
    name_words,
    profile_column,
    spread_sample,
)
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

__all__ = ["DataError", "Detection", "detect_fields", "detect_from_rows", "detect_nested"]


@dataclass
class Detection:
    format: str  # "columns" | "chat"
    prompt_field: str | None
    reference_field: str | None
    context_fields: list[str]
    messages_field: str | None
    columns: list[str]
    num_rows: int | None
    reasons: dict[str, str]
    # Not part of the inspect --json contract: the long worked solution when the reference is a short final answer.
    # SFT trains on it (teaching "42" alone would teach no reasoning); GRPO compares against the short answer.
    solution_field: str | None = field(default=None, repr=False)
    # Preference data (format "preference", app/data/preference.py): the preferred and the rejected answer's columns,
    # or two answers (pair_fields) and the label column or the two score columns that rank them (preference_field).
    chosen_field: str | None = None
    rejected_field: str | None = None
    pair_fields: list[str] | None = None
    preference_field: str | list[str] | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("solution_field")
        return d

    def fields_line(self) -> str:
        """'prompt question, reference answer (qlora-app inspect shows why)': the dry run's and train.log's line."""
        parts = [f"{role.removesuffix('_field')} {getattr(self, role)}"
                 for role in ("prompt_field", "reference_field", "messages_field", "chosen_field", "rejected_field")
                 if getattr(self, role)]
        if self.pair_fields:
            parts.append(f"answers {' / '.join(self.pair_fields)} ranked by {self.preference_field}")
        if self.context_fields:
            parts.append("context " + ", ".join(self.context_fields))
        return (", ".join(parts) or "none found") + " (qlora-app inspect shows why)"



# ------------------------------------------------------------------------------------------------ detection


def _resolve_override(name: str, columns: list[str], what: str) -> str:
    if name in columns:
        return name
    folded = [c for c in columns if c.lower() == name.lower()]
    if len(folded) == 1:  # '--prompt-field question' on a CSV whose header says 'Question'
        return folded[0]
    raise DataError(f"{what} '{name}' is not a column of this dataset; columns are: {', '.join(columns)}")


def _describe(p: Profile) -> str:
    return f"{p.kind}, {round(p.share * 100)}% of sampled rows filled, avg {round(p.avg_len)} chars"


REFERENCE_KINDS = {"text", "number", "bool", "list_text", "answer_dict", "messages"}


def detect_fields(ds, prompt_field: str | None = None, reference_field: str | None = None,
                  sample_rows: int = 64, *, num_rows: int | None = None, **pair_fields) -> Detection:
    """Detect the roles of ``ds``'s columns from a bounded sample. Overrides win over detection.

    ``num_rows`` lets a caller that only read a sample (``inspect`` on a big file) report the true size."""
    rows = spread_sample(ds, sample_rows)
    return detect_from_rows(rows, list(ds.column_names), prompt_field, reference_field,
                            num_rows if num_rows is not None else len(ds), **pair_fields)


def flatten_row(row: dict, prefix: str = "") -> dict:
    """Nested objects as dotted columns ({"data": {"question": q}} -> {"data.question": q}), the names
    ``datasets.Dataset.flatten`` gives the same data; lists are left whole."""
    out = {}
    for k, v in row.items():
        if isinstance(v, dict) and v:
            out.update(flatten_row(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def detect_nested(rows: list[dict], columns: list[str], prompt_field: str | None = None,
                  reference_field: str | None = None, num_rows: int | None = None,
                  **pair_fields) -> tuple[Detection, bool]:
    """(Detection, flattened). Where the top-level columns give no prompt (or an override names a dotted field),
    the rows' nested objects are read as dotted columns; flattened=True tells the caller to flatten the data alike.
    Top-level columns come first so that answer objects (SQuAD's answers) and metadata stay whole."""
    try:
        return detect_from_rows(rows, columns, prompt_field, reference_field, num_rows, **pair_fields), False
    except DataError:
        flat = [flatten_row(r) if isinstance(r, dict) else r for r in rows]
        flat_columns = list(dict.fromkeys(k for r in flat if isinstance(r, dict) for k in r))
        if set(flat_columns) == set(columns):
            raise
    det = detect_from_rows(flat, flat_columns, prompt_field, reference_field, num_rows, **pair_fields)
    det.reasons["format"] = det.reasons.get("format", "") + "; nested objects read as dotted columns"
    return det, True


def detect_from_rows(rows: list[dict], columns: list[str], prompt_field: str | None = None,
                     reference_field: str | None = None, num_rows: int | None = None, *,
                     chosen_field: str | None = None, rejected_field: str | None = None) -> Detection:
    """The detection proper, on already-sampled rows (``inspect`` reads only the first rows of big files).
    ``chosen_field`` / ``rejected_field``: overrides of a preference pair's columns (app/data/preference.py)."""
    if not columns:
        raise DataError("the dataset has no columns; pass a file with named fields (e.g. JSONL objects)")
    p_override = _resolve_override(prompt_field, columns, "--prompt-field") if prompt_field else None
    r_override = _resolve_override(reference_field, columns, "--reference-field") if reference_field else None
    pair = {k: _resolve_override(v, columns, f"--{k.replace('_', '-')}") if v else None
            for k, v in (("chosen_field", chosen_field), ("rejected_field", rejected_field))}
    d = _Detector(rows, columns)
    prompt, reference = p_override, r_override
    if p_override:
        d.reasons["prompt_field"] = f"set by override ({_describe(d.prof[p_override])})"
    if r_override:
        d.reasons["reference_field"] = f"set by override ({_describe(d.prof[r_override])})"
    prompt = prompt or d.named_prompt(exclude={reference})
    reference = reference or d.named_reference(exclude={prompt})

    # Conversations (messages / ShareGPT conversations) carry prompt and answer themselves: chat format unless
    # the data also has separate prompt + reference columns (OpenR1 and NuminaMath ship both; columns win).
    fmt, messages = "columns", None
    conv = d.conversation(exclude={prompt, reference})
    if conv is None and prompt is None and reference and d.prof[reference].has_assistant:
        conv = reference  # only chosen/rejected conversations (HH-RLHF as messages): train on the chosen ones
    if conv and not p_override and (prompt is None or reference is None):
        fmt, messages, prompt = "chat", conv, None
        d.reasons.pop("prompt_field", None)
        if reference and not r_override and d.prof[reference].kind == "messages":
            reference = None
            d.reasons.pop("reference_field", None)
        d.reasons["format"] = (f"'{conv}' holds conversations (lists of role/content turns with an assistant turn) "
                               "and there are no separate prompt + reference columns")
        d.reasons["messages_field"] = "conversation column; the prompt is the turns before the last assistant turn"

    if fmt == "columns" and prompt is None:
        prompt, reference = d.prompt_by_value(reference, reference_overridden=bool(r_override))
    if fmt == "columns" and reference is None and not r_override:
        reference = d.reference_by_position(prompt) or d.reference_by_value(prompt)
    if reference is None and not r_override:
        reference = d.nested_reference(exclude={prompt, messages})
    if fmt == "chat" and reference is None and not r_override:
        # The answer each conversation already gives: GRPO scores against it, compare judges by it.
        reference = messages
        d.reasons["reference_field"] = (f"the last assistant turn of '{messages}' (chat data: the answer each "
                                        "conversation ends with; one that ends with a user turn has none)")
    contexts = d.contexts(prompt, {prompt, reference, messages}) if prompt else []

    if reference is None:
        d.reasons["reference_field"] = ("no reference-like column (answer, output, response, target, ...): "
                                        "text-only data; name one to set it (Reference field in the UI, "
                                        "--reference-field NAME in the CLI)")
    d.reasons.setdefault("format", "separate prompt / reference columns" if reference else "prompt text only")
    solution = d.solution(reference) if reference and not r_override and fmt == "columns" else None
    det = Detection(fmt, prompt, reference, contexts, messages, columns, num_rows, d.reasons, solution)
    return with_preference(det, d, pair["chosen_field"], pair["rejected_field"], bool(p_override), bool(r_override))


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


class _Detector:
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
                 and c not in self.option_letters and self._prompt_ok(c, self.ps[c][0] >= 80)]
        if not cands:
            return None
        best = min(cands, key=lambda c: (-self.ps[c][0], self.order[c]))
        self.reasons["prompt_field"] = f"name word '{self.ps[best][1]}' means prompt ({_describe(self.prof[best])})"
        return best

    def _ref_ok(self, c: str) -> bool:
        p = self.prof[c]
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
                                           f"({_describe(self.prof[best])}){extra}")
        return best

    def conversation(self, exclude: set) -> str | None:
        cands = [c for c in self.columns if c not in exclude and self.prof[c].kind == "messages"
                 and self.prof[c].has_assistant and not self._meta(c) and self.rs[c][1] != "chosen"]
        chatty = {"messages", "conversations", "conversation", "chat", "dialog", "dialogue", "turns"}
        cands.sort(key=lambda c: (0 if set(self.prof[c].words) & chatty else 1, self.order[c]))
        return cands[0] if cands else None

    def prompt_by_value(self, reference: str | None, reference_overridden: bool) -> tuple[str, str | None]:
        prose = [c for c in self.columns if c != reference and self._prompt_ok(c, False) and self.rs[c][0] == 0
                 and not self._meta(c) and self.prof[c].kind == "text"]
        if not prose and reference and not reference_overridden and self.prof[reference].kind == "text":
            # The only prose is "reference"-named (e.g. chosen/rejected transcripts): it is text to train on.
            self.reasons["prompt_field"] = f"the only prose column; used as the text ({_describe(self.prof[reference])})"
            self.reasons.pop("reference_field", None)
            return reference, None
        if not prose:
            prose = [c for c in self.columns if c != reference and self.prof[c].kind == "text" and not self._meta(c)]
        if not prose:
            kinds = ", ".join(f"{c} ({self.prof[c].kind})" for c in self.columns)
            raise DataError(f"no text-like column to use as the prompt (columns: {kinds}); "
                            "pass --prompt-field NAME or a dataset with a text column")
        if reference is None and len(prose) >= 2:
            # Two unnamed text columns: datasets put the input first and the output second.
            p, r = prose[0], prose[1]
            self.reasons["prompt_field"] = f"no known prompt name; first text column ({_describe(self.prof[p])})"
            self.reasons["reference_field"] = f"no known reference name; second text column ({_describe(self.prof[r])})"
            return p, r
        p = max(prose, key=lambda c: (self.prof[c].avg_len, -self.order[c]))
        self.reasons["prompt_field"] = f"no known prompt name; longest text column ({_describe(self.prof[p])})"
        return p, reference

    def reference_by_position(self, prompt: str) -> str | None:
        """A named prompt ('prompt', 'question') followed by one unnamed prose column ('story'): that is the answer.
        Not for generic prompt names ('text' + 'title' is a text corpus with metadata)."""
        if self.ps[prompt][1] in ("text", "content", "body", "document", "article", "x") or self.ps[prompt][0] == 0:
            return None
        rest = [c for c in self.columns if self.order[c] > self.order[prompt] and self.prof[c].kind == "text"
                and self.ps[c][0] == 0 and self.rs[c][0] == 0 and not self._meta(c) and not self.prof[c].id_like
                and not self.prof[c].categorical and self.prof[c].avg_len >= 20
                and not set(self.prof[c].words) & (PASSAGE_WORDS | AFTER_WORDS)]
        if len(rest) != 1:
            return None
        self.reasons["reference_field"] = (f"no known reference name; the only other prose column, after the prompt "
                                           f"({_describe(self.prof[rest[0]])})")
        return rest[0]

    def reference_by_value(self, prompt: str) -> str | None:
        """In any language ('Frage' / 'Antwort'): beside a question-like prompt, the one column of short numbers or
        of GSM8K-style '... #### N' answers is the reference, whatever its header says."""
        if self.prof[prompt].kind != "text" or self.prof[prompt].avg_len < 15:
            return None
        found = {c: why for c in self.columns if c != prompt and not self._meta(c) and c not in self.option_letters
                 and (why := _answer_values(self.prof[c]))}
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
