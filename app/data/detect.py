"""Which column is the prompt, which is the reference: detected from names *and* values, with a reason for each.

Why this exists: other tools either want a hand-written column map or guess by substring (and then match "text"
inside "context"). Here a column name is split into words (snake_case, kebab-case, spaces, camelCase) and each word
is looked up in small synonym tables, so "context" is never "text" and "answerKey" is an answer. Values decide the
rest: a categorical "source" column is metadata, not a prompt; a list of {role, content} dicts is a conversation.

Only a bounded sample of rows is looked at, so the cost does not grow with the dataset. Only the standard library is
imported here (the CLI imports this package for --help).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from app.data.images import find_image_field, image_values, images_per_row
from app.data.preference import with_label_override, with_preference
from app.data.profile import spread_sample
from app.data.rules import Detector, describe
from app.errors import DataError

__all__ = ["DataError", "Detection", "detect_fields", "detect_from_rows", "detect_nested"]


# A mix's column naming each row's dataset (app/data/mixing.py): kept through the conversions, so the reward functions
# (TRL passes them a row's columns) and the held-out figures can tell the datasets apart.
SOURCE = "source"


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
    # Unpaired preference data (TRL's prompt / completion / label, as KTO trains on): the true/false column that says
    # whether a row's answer is one to learn; rows labelled false are answers to avoid, so they are left out.
    desirable_field: str | None = None
    # A column named like a label whose values spell no good / bad label (its name and up to six values as written):
    # what the refusal of a method that needs labels names. Not part of the inspect --json contract.
    unread_labels: tuple | None = field(default=None, repr=False)
    label_candidates: tuple = field(default=(), repr=False)  # columns whose values spell labels, names say none
    # A mix (data.mix, app/data/mixing.py): per dataset its name, share, rows drawn of rows there, repeats, held-out
    # rows and the fields detected in it; its rows are in the run's columns, the dataset's name in 'source'.
    mix: list[dict] | None = None
    # held-out rows that repeat training rows, as build_splits found and left them out (app/data/leaks.Leaks.to_dict)
    leaks: dict | None = field(default=None, repr=False)
    # Image data (app/data/images.py): the column holding each row's images (or the conversation column whose turns
    # carry image parts), and the fewest and most images a sampled row has.
    image_field: str | None = None
    images_per_row: tuple[int, int] | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        # the splits' leak check is inspect's own key ("leaks"), not a detected field
        d.pop("solution_field"), d.pop("unread_labels"), d.pop("label_candidates"), d.pop("leaks")
        if d["mix"] is None:  # one dataset (inspect's contract); a mix's plan --json has its parts
            d.pop("mix")
        if d["image_field"] is None:  # text data keeps inspect's contract; image data adds its two keys
            d.pop("image_field"), d.pop("images_per_row")
        return d

    def fields_line(self) -> str:
        """'prompt question, reference answer (qlora-app inspect shows why)': the dry run's and train.log's line."""
        if self.mix:  # each dataset's own fields, mapped to the run's
            return "; ".join(f"{p['name']}: {p['fields']}" for p in self.mix) + " (qlora-app inspect DATASET shows why)"
        parts = [f"{role.removesuffix('_field')} {getattr(self, role)}"
                 for role in ("prompt_field", "reference_field", "messages_field", "chosen_field", "rejected_field")
                 if getattr(self, role)]
        if self.pair_fields:
            parts.append(f"answers {' / '.join(self.pair_fields)} ranked by {self.preference_field}")
        if self.context_fields:
            parts.append("context " + ", ".join(self.context_fields))
        if self.desirable_field:
            parts.append(f"label {self.desirable_field} (good / bad: KTO learns from both, the other methods and "
                         "compare from the good rows only)")
        if self.image_field:
            lo, hi = self.images_per_row or (1, 1)
            parts.append(f"images {self.image_field} ({lo if lo == hi else f'{lo}-{hi}'} per row)")
        return (", ".join(parts) or "none found") + " (qlora-app inspect shows why)"



# ------------------------------------------------------------------------------------------------ detection


def _only_images(rows: list[dict], column: str) -> bool:
    """Whether a column holds images and nothing else (a conversation with image parts holds text too)."""
    return all(image_values(r.get(column)) is not None for r in rows if r.get(column) is not None)


def _resolve_override(name: str, columns: list[str], what: str) -> str:
    if name in columns:
        return name
    folded = [c for c in columns if c.lower() == name.lower()]
    if len(folded) == 1:  # '--prompt-field question' on a CSV whose header says 'Question'
        return folded[0]
    key, _, where = what.partition(" from ")  # "data.prompt_field from preset demo-grpo": a value not typed
    raise DataError(f"{key} '{name}'" + (f" (from {where})" if where else "") + " is not a column of this dataset; "
                    f"columns are: {', '.join(columns)}" + (" (name one, or leave it empty to detect it)" if where
                                                            else ""))


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
    flat = [flatten_row(r) if isinstance(r, dict) else r for r in rows]
    flat_columns = list(dict.fromkeys(k for r in flat if isinstance(r, dict) for k in r))
    try:
        top = detect_from_rows(rows, columns, prompt_field, reference_field, num_rows, **pair_fields)
    except DataError:
        if set(flat_columns) == set(columns):
            raise
    else:
        if top.format == "preference" or set(flat_columns) == set(columns):
            return top, False
        try:  # a pair nested inside objects ({"answers": {"better": ..., "worse": ...}}) is a pair all the same
            nested = detect_from_rows(flat, flat_columns, prompt_field, reference_field, num_rows, **pair_fields)
        except DataError:
            return top, False
        if nested.format != "preference":
            return top, False
        det = nested
        det.reasons["format"] = det.reasons.get("format", "") + "; nested objects read as dotted columns"
        return det, True
    det = detect_from_rows(flat, flat_columns, prompt_field, reference_field, num_rows, **pair_fields)
    det.reasons["format"] = det.reasons.get("format", "") + "; nested objects read as dotted columns"
    return det, True


def detect_from_rows(rows: list[dict], columns: list[str], prompt_field: str | None = None,
                     reference_field: str | None = None, num_rows: int | None = None, *,
                     chosen_field: str | None = None, rejected_field: str | None = None,
                     label_field: str | None = None, said: dict | None = None, _images: bool = True) -> Detection:
    """The detection proper, on already-sampled rows (``inspect`` reads only the first rows of big files).
    ``chosen_field`` / ``rejected_field``: overrides of a preference pair's columns (app/data/preference.py).
    ``said``: how messages name an override ({"prompt_field": "data.prompt_field from preset demo-grpo"});
    default, its flag."""
    if not columns:
        raise DataError("the dataset has no columns; pass a file with named fields (e.g. JSONL objects)")
    image, why = find_image_field(rows, columns) if _images else (None, "")
    if image:
        # the images are no prompt, reference or context: the other columns are detected as for text data
        text_columns = [c for c in columns if c != image or not _only_images(rows, c)]
        det = detect_from_rows([{k: v for k, v in r.items() if k in text_columns} for r in rows], text_columns,
                               prompt_field, reference_field, num_rows, chosen_field=chosen_field,
                               rejected_field=rejected_field, label_field=label_field, said=said, _images=False)
        det.columns = columns
        det.image_field, det.images_per_row = image, images_per_row(rows, image)
        det.reasons["image_field"] = why
        return det
    said = {k: (said or {}).get(k) or f"--{k.replace('_', '-')}"
            for k in ("prompt_field", "reference_field", "chosen_field", "rejected_field", "label_field")}
    p_override = _resolve_override(prompt_field, columns, said["prompt_field"]) if prompt_field else None
    r_override = _resolve_override(reference_field, columns, said["reference_field"]) if reference_field else None
    pair = {k: _resolve_override(v, columns, said[k]) if v else None
            for k, v in (("chosen_field", chosen_field), ("rejected_field", rejected_field))}
    d = Detector(rows, columns)
    prompt, reference = p_override, r_override
    if p_override:
        d.reasons["prompt_field"] = f"set by override ({describe(d.prof[p_override])})"
    if r_override:
        d.reasons["reference_field"] = f"set by override ({describe(d.prof[r_override])})"
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
    det = with_preference(det, d, pair["chosen_field"], pair["rejected_field"], bool(p_override), bool(r_override),
                          said=said)
    if label_field:
        det = with_label_override(det, d, _resolve_override(label_field, columns, said["label_field"]),
                                  said["label_field"])
    return det
