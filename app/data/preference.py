"""Preference data: which fields hold a chosen and a rejected answer, and the pairs they make, in the layouts people
publish:
  - named: prompt + chosen + rejected columns (strings or message lists; UltraFeedback, Argilla, TRL's own);
  - shared prefix: chosen + rejected whole transcripts and no prompt column, the prompt being what both start with
    (Anthropic HH's "\\n\\nHuman: ... \\n\\nAssistant: ...", or message lists sharing their leading turns);
  - labelled: two answers (response_a / response_b, completion_0 / completion_1, human_ref_A / human_ref_B, ...)
    and either a label naming the better one (preference, winner, better_response_id, labels, ...) or a score for
    each (the higher wins).
The general rule: a column whose name marks it as the worse or losing answer is never a prompt or a reference; two
answer columns to the same prompt ordered by their names (any of the conventions below, in any casing), by a label
or by scores are a pair, at the top level of a row or nested inside objects; two answers nothing orders are said so,
with the --chosen-field / --rejected-field that make them a pair.
A row whose two answers are equal, or that lacks one side, is no pair: it is counted and skipped, with a line.

Owns preference detection and the pairs (``pair_of``; app/data/convert.py's ``to_dpo`` formats them for TRL). Must
not choose prompt / reference columns for other data (app/data/detect.py does); only the standard library at module
level.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from app.data.profile import name_words, value_kind
from app.data.turns import normalize_messages, value_text
from app.data.vocabulary import METADATA_WORDS
from app.errors import DataError, UserError

log = logging.getLogger("qlora_app")

# How names say which answer is the better one (a pair is one word from each, in any casing).
CHOSEN_WORDS = {"chosen", "preferred", "accepted", "winner", "winning", "won", "positive", "good", "better", "best",
                "win", "pos", "correct", "right", "selected", "approved", "liked", "upvoted", "high", "higher",
                "favored", "favoured"}
REJECTED_WORDS = {"rejected", "dispreferred", "declined", "loser", "losing", "lost", "negative", "bad", "worse",
                  "worst", "lose", "loss", "neg", "incorrect", "wrong", "unselected", "disapproved", "disliked",
                  "downvoted", "low", "lower", "unfavored", "unfavoured", "refused"}
LABEL_WORDS = {"label", "labels", "preference", "preferences", "preferred", "winner", "better", "choice", "chosen",
               "best", "pick"}
# Stems of two columns that hold passages to compare, not answers to one prompt (sentence1 / sentence2 of MRPC).
NOT_TWIN_ANSWER_WORDS = {"sentence", "sentences", "premise", "hypothesis", "question", "questions", "context",
                         "passage", "title", "choice", "option", "ending", "candidate"}
SCORE_WORDS = {"score", "scores", "rating", "ratings", "reward", "rewards", "rank"}
ANSWER_WORDS = {"response", "responses", "completion", "completions", "answer", "answers", "output", "outputs",
                "reply", "generation", "text", "conversation", "conversations"}
NOT_ANSWER_WORDS = METADATA_WORDS | SCORE_WORDS | {"role"}
# Twins whose last parts say which is better by convention: Stack Exchange paired's response_j (better) / response_k.
ORDERED_PARTS = {("j", "k")}
_TURN = re.compile(r"\n*(Human|Assistant|User):\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Pair:
    prompt: list[dict]  # the conversation before the answers (no system prompt added yet)
    chosen: str
    rejected: str


def _side(words: list[str]) -> str | None:
    if set(words) & REJECTED_WORDS:
        return "rejected"
    if set(words) & CHOSEN_WORDS:
        return "chosen"
    return None


def losing(words: list[str]) -> bool:
    """Whether a column's name marks it as the worse or losing answer: never a prompt nor a reference."""
    return bool(set(words) & REJECTED_WORDS)


def _answerish(kind: str) -> bool:
    # numbers too: a CSV of short answers ("42" vs "41") reads its answer columns as numbers
    return kind in ("text", "messages", "number")


def find_named(profiles: dict, chosen: str | None = None, rejected: str | None = None) -> tuple[str, str] | None:
    """(chosen column, rejected column) by their names (or the overrides), both text or message lists. The plainest
    name wins ('chosen' over 'chosen_response'); a name with a metadata word ('chosen_model', 'score_chosen') is
    about the answer, not the answer."""
    if chosen and rejected:
        return chosen, rejected
    sides: dict[str, list[str]] = {"chosen": [], "rejected": []}
    for c, p in profiles.items():
        side = _side(p.words)
        if side and _answerish(p.kind) and not (set(p.words) - CHOSEN_WORDS - REJECTED_WORDS) & NOT_ANSWER_WORDS:
            sides[side].append(c)
    # the plainest name, then the longer values: 'chosen.content' over 'chosen.role' of a message read as columns
    plainest = {side: min(cols, key=lambda c: (len(profiles[c].words), -profiles[c].avg_len)) if cols else None
                for side, cols in sides.items()}
    chosen, rejected = chosen or plainest["chosen"], rejected or plainest["rejected"]
    return (chosen, rejected) if chosen and rejected and chosen != rejected else None


def _twin_key(words: list[str]) -> tuple[tuple[str, ...], str] | None:
    """('response', 'a') for response_a / responseA / response_0 / response_j: the stem and the one distinguishing
    part."""
    if len(words) < 2 or not re.fullmatch(r"[abjk]|[0-9]", words[-1]):
        return None
    return tuple(words[:-1]), words[-1]


def find_labelled(profiles: dict) -> dict | None:
    """{'pair': [a, b], 'label': column}, {'pair': [a, b], 'scores': [sa, sb]}, or {'pair': [a, b]} when nothing
    ranks them: two answers and what ranks them. Two columns are twin answers when their names differ only in a
    last a/b or digit part and they hold answers: an answer word in the stem (response_a), or longer prose whose stem
    is no metadata nor passage word (human_ref_A). A label ranks them only when every sampled value names one of
    them (or is a tie)."""
    twins: dict[tuple, list[tuple[str, str]]] = {}
    for c, p in profiles.items():
        key = _twin_key(p.words)
        if key:
            twins.setdefault(key[0], []).append((key[1], c))

    def answers_ok(stem, cols) -> bool:
        if not all(_answerish(profiles[c].kind) for c in cols) or set(stem) & NOT_ANSWER_WORDS:
            return False
        if set(stem) & ANSWER_WORDS:
            return True
        return (not set(stem) & NOT_TWIN_ANSWER_WORDS and all(profiles[c].kind in ("text", "messages")
                                                               and profiles[c].avg_len >= 20 for c in cols))

    answers = next(([c for _, c in sorted(v)] for stem, v in twins.items() if len(v) == 2
                    and answers_ok(stem, [c for _, c in v])), None)
    if not answers:
        return None
    parts = tuple(_twin_key(profiles[c].words)[1] for c in answers)
    if parts in ORDERED_PARTS:  # ordered by the convention its names follow
        return {"pair": answers, "named": True}
    scores = next(([c for _, c in sorted(v)] for stem, v in twins.items() if len(v) == 2
                   and set(stem) & SCORE_WORDS and all(profiles[c].kind == "number" for _, c in v)), None)
    if scores:
        return {"pair": answers, "scores": scores}
    labels = [c for c, p in profiles.items() if c not in answers and set(p.words) & LABEL_WORDS
              and p.kind in ("text", "number", "bool")]
    label = next((c for c in labels if all(_names_one(v, answers) is not None for v in profiles[c].sample
                                           if v is not None and value_text(v).strip())), None)
    return {"pair": answers, "label": label} if label else {"pair": answers}


def _names_one(value, pair: list[str]) -> str | None:
    """The answer column of ``pair`` a label value names ("a", "response_b", "model_a", 1 of a/b, 0 / 1 of
    response_0 / response_1), "tie" for a tie, or None when it names neither."""
    text = "" if isinstance(value, bool) else value_text(value).strip().lower()
    a, b = pair
    parts = {a: _twin_key(name_words(a))[1], b: _twin_key(name_words(b))[1]}
    worded = any(ch.isalpha() for ch in text)  # 'model_b' names b by its end; '-2' (a signed strength) does not
    for col in (a, b):
        part = parts[col]
        if text in (col.lower(), part) or (worded and text.endswith(("_" + part, " " + part, "-" + part))):
            return col
    if parts[a].isalpha():
        # A / B ranked by a number: 1 / 2 count the answers; 1 / 0 say whether A is the better one (Stanford SHP's
        # labels: 1 if A is preferred to B)
        if text in ("1", "1.0"):
            return a
        if text in ("2", "2.0", "0", "0.0"):
            return b
    if text in ("tie", "both", "equal", "same", "draw", "tie (bothbad)", "neither"):
        return "tie"
    return None


def with_preference(det, d, chosen: str | None = None, rejected: str | None = None, prompt_set: bool = False,
                    reference_set: bool = False, said: dict | None = None):
    """``det`` as preference data when its columns hold a chosen and a rejected answer (or two answers and what
    ranks them); else ``det`` as it was. ``d``: the detector that made it (app.data.detect: profiles, reasons,
    named_reference); ``chosen`` / ``rejected``: overrides (already resolved to columns); ``prompt_set`` /
    ``reference_set``: whether those were overridden."""
    said = said or {}
    labelled = find_labelled(d.prof)
    if labelled and (chosen or rejected) and not (chosen and rejected):
        # an override on a ranked file is obeyed (the other answer is the other twin) or refused, never ignored
        given = chosen or rejected
        if given not in labelled["pair"]:
            flag = said.get("chosen_field" if chosen else "rejected_field")
            raise DataError(f"{flag} '{given}' is not one of the two answers '{labelled['pair'][0]}' / "
                            f"'{labelled['pair'][1]}'; name one of them, or drop it to rank them by "
                            f"{labelled.get('label') or ' / '.join(labelled.get('scores') or []) or 'name'}")
        other = next(c for c in labelled["pair"] if c != given)
        chosen, rejected = (given, other) if chosen else (other, given)
        ranker = labelled.get("label") or " / ".join(labelled.get("scores") or [])
        if ranker:
            d.reasons["preference_field"] = f"'{ranker}' not used: the override names the preferred answer of every row"
    named = find_named(d.prof, chosen, rejected)
    if named is None and labelled is not None and labelled.get("named"):
        named = tuple(labelled["pair"])
    if named is None and labelled is not None and len(labelled) == 1:  # two answers, nothing says which is better
        a, b = labelled["pair"]
        d.reasons["format"] = (d.reasons.get("format", "") + f"; '{a}' and '{b}' look like two answers to the same "
                               f"prompt, but no label or score says which is better: pass --chosen-field NAME "
                               f"--rejected-field NAME to train on them as preference pairs")
        if det.reference_field in (a, b) and not reference_set:  # either may be the worse: neither is learnt
            det.reference_field = None
            d.reasons["reference_field"] = (f"none: '{a}' / '{b}' are two answers nothing orders (name the better "
                                            "one with --chosen-field, or a reference with --reference-field)")
        labelled = None
    labelled = None if named else labelled
    if named is None and labelled is None and not (chosen or rejected):
        return with_desirable(det, d)
    if named is None and labelled is None:
        if chosen or rejected:
            given, other = ("chosen_field", "rejected_field") if chosen else ("rejected_field", "chosen_field")
            given, other = said.get(given, f"--{given.replace('_', '-')}"), f"--{other.replace('_', '-')}"
            raise DataError(f"{given} is set but no column holds the other answer of the pair; pass {other} NAME")
        return det
    rankers = [] if named else ([labelled["label"]] if "label" in labelled else list(labelled["scores"]))
    taken = set(named or labelled["pair"]) | set(rankers)
    r = d.reasons
    det.format, det.messages_field = "preference", None
    r.pop("messages_field", None)
    det.context_fields = [c for c in det.context_fields if c not in taken]
    if det.prompt_field in taken and not prompt_set:
        det.prompt_field = d.named_prompt(exclude=taken) or d.prose_prompt(exclude=taken)
    if det.prompt_field is None:
        r["prompt_field"] = ("no prompt column: the prompt is what both answers start with (the turns before their "
                             "last assistant turn)")
    # what ranks the answers (a label, scores) is no reference either, used or not; nor is any other column of a
    # side ('chosen.role' beside 'chosen.content')
    rankish = {c for c, p in d.prof.items() if set(p.words) & (LABEL_WORDS | SCORE_WORDS)
               and p.kind in ("text", "number", "bool")} if labelled else set()
    rankish |= {c for c, p in d.prof.items() if _side(p.words) and c not in (named or ())[:1]}
    if not reference_set and (det.reference_field is None or det.reference_field in taken | rankish):
        det.reference_field = d.named_reference(exclude=taken | rankish | {det.prompt_field})
        if det.reference_field is None and named:
            det.reference_field = named[0]
            r["reference_field"] = ("the preferred answer (no separate reference column): SFT learns it, GRPO and "
                                    "compare score against it")
        elif det.reference_field is None:
            r["reference_field"] = ("the better answer of each row, as its label or scores rank them (no separate "
                                    "reference column): SFT learns it, GRPO and compare score against it")
    if named:
        det.chosen_field, det.rejected_field = named
        set_by = "set by override" if chosen or rejected else "named so"
        r["chosen_field"], r["rejected_field"] = (f"{set_by}: the preferred answer", f"{set_by}: the answer that lost")
        r["format"] = f"preference pairs: '{named[0]}' (preferred) and '{named[1]}' (rejected) answers"
    else:
        det.pair_fields = list(labelled["pair"])
        det.preference_field = rankers[0] if "label" in labelled else rankers
        by = f"the label in '{rankers[0]}'" if "label" in labelled else f"the higher score of {' / '.join(rankers)}"
        r["preference_field"] = f"{by} names the better of '{labelled['pair'][0]}' and '{labelled['pair'][1]}'"
        r["format"] = f"preference pairs: two answers ({', '.join(labelled['pair'])}) ranked by {by}"
    return det


DESIRABLE_WORDS = LABEL_WORDS | {"desirable", "good", "accepted", "preferred", "kto", "positive"}


def with_desirable(det, d):
    """Unpaired preference data (TRL's prompt / completion / label, as KTO trains on): a good / bad column beside
    the answer (true / false, yes / no, 1 / 0, 👍 / 👎, ...: app.data.profile.label_value) says whether the answer is
    one to learn. The rows labelled false are answers to avoid, so they are
    never a reference nor an SFT target: app.data.loading keeps only the rows labelled true."""
    if det.reference_field is None:
        return det
    found = next((c for c, p in d.prof.items() if (p.kind == "bool" or p.labels) and c != det.reference_field
                  and set(p.words) & DESIRABLE_WORDS), None)
    if not found:  # a label-named column whose values spell no label: kept for the refusal's words
        det.unread_labels = next(((c, p.values) for c, p in d.prof.items() if c != det.reference_field and p.values
                                  and set(p.words) & DESIRABLE_WORDS), None)
        # columns whose values spell good / bad but whose names say no label ('thumbs', 'feedback'): named in it
        det.label_candidates = tuple(c for c, p in d.prof.items() if c != det.reference_field
                                     and (p.kind == "bool" or p.labels))
    if found:
        det.desirable_field = found
        d.reasons["desirable_field"] = (f"'{found}' says whether each row's '{det.reference_field}' is an answer to "
                                        "learn (unpaired preference data, as KTO trains on): rows labelled false are "
                                        "answers to avoid, so SFT, GRPO and compare use only the rows labelled true; "
                                        "KTO (--method kto) learns from both; DPO needs pairs")
    return det


def with_label_override(det, d, column: str, said: str):
    """``det`` with ``column`` (data.label_field, resolved) as its good / bad label, whatever its name; values that
    spell no label, or preference pairs, are one line naming the column."""
    if det.format == "preference":
        raise DataError(f"{said} names the good / bad column of unpaired answers, and this data is preference pairs "
                        f"({det.reasons.get('format', '')}); drop {said}")
    if column == det.reference_field:
        raise DataError(f"{said} '{column}' is the reference (the answer itself); name the column that says whether "
                        "the answer is good")
    p = d.prof[column]
    if not (p.kind == "bool" or p.labels):
        shown = ", ".join(repr(v) for v in p.values) or "other values"
        raise DataError(f"{said} '{column}' holds {shown}, which spell no good / bad label (true / false, yes / no, "
                        "1 / 0, good / bad, up / down, 👍 / 👎 do, both of them); map them to those, or name "
                        "another column")
    det.desirable_field = column
    d.reasons["desirable_field"] = (f"set by override: '{column}' says whether each row's '{det.reference_field}' is "
                                    "an answer to learn (KTO learns from both; the other methods use the good ones)")
    det.reasons = d.reasons
    return det


def shared_prompt(row: dict, det) -> list[dict]:
    """A preference row's prompt when it has no prompt column: the turns before the first answer's last one."""
    found = _answer(row.get(det.chosen_field or det.pair_fields[0]))
    return found[0] if found else []


def answer_text(v) -> str | None:
    """The answer a chosen / rejected cell holds (its last assistant turn, or the text itself)."""
    found = _answer(v)
    return found[1] if found else None


def _messages(v) -> list[dict] | None:
    if isinstance(v, (list, tuple)) and value_kind(list(v)) == "messages":
        return normalize_messages(v)
    if isinstance(v, str) and _TURN.search(v):
        parts = _TURN.split(v)
        turns = [{"role": "assistant" if r.lower() == "assistant" else "user", "content": t.strip()}
                 for r, t in zip(parts[1::2], parts[2::2])]
        return turns if turns else None
    return None


def _answer(v) -> tuple[list[dict], str] | None:
    """(the turns before the answer, the answer): a message list's last assistant turn, a transcript's last
    Assistant turn, or a plain string answer (no turns before it)."""
    msgs = _messages(v)
    if msgs:
        if msgs[-1]["role"] != "assistant" or not msgs[-1]["content"].strip():
            return None
        return msgs[:-1], msgs[-1]["content"]
    if isinstance(v, str) and v.strip():
        return [], v
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:  # a number read from a CSV; NaN = empty
        return [], value_text(v)
    return None


def _better(row: dict, det) -> tuple[str, str] | None:
    """(chosen column, rejected column) of a labelled row, by its label or its scores; None for a tie or a label
    that names neither answer."""
    a, b = det.pair_fields
    if isinstance(det.preference_field, list):
        sa, sb = (row.get(c) for c in det.preference_field)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (sa, sb)) or sa == sb:
            return None
        return (a, b) if sa > sb else (b, a)
    better = _names_one(row.get(det.preference_field), [a, b])
    return None if better in (None, "tie") else (better, b if better == a else a)


def pair_of(row: dict, det) -> Pair | None:
    """The pair a preference row holds, or None (a side missing, both answers equal, a tie)."""
    chosen_col, rejected_col = (det.chosen_field, det.rejected_field) if det.chosen_field else (_better(row, det)
                                                                                               or (None, None))
    if chosen_col is None:
        return None
    c, r = _answer(row.get(chosen_col)), _answer(row.get(rejected_col))
    if c is None or r is None or c[1].strip() == r[1].strip():
        return None
    if det.prompt_field:
        v = row.get(det.prompt_field)
        prompt = _messages(v) if isinstance(v, (list, tuple)) else None
        prompt = prompt or [{"role": "user", "content": value_text(v)}]
        if not prompt[-1]["content"].strip():
            return None
    else:  # the shared prefix: the turns both answers follow
        if c[0] != r[0] or not c[0]:
            return None
        prompt = c[0]
    return Pair(prompt=prompt, chosen=c[1], rejected=r[1])


def require_labels(det) -> None:
    """Method kto needs answers labelled good or bad: unpaired rows with a true/false column (TRL's prompt /
    completion / label), or preference pairs (each side an answer); one line naming the fix otherwise."""
    if det.format == "preference" or getattr(det, "desirable_field", None):
        return
    unread = getattr(det, "unread_labels", None)
    candidates = getattr(det, "label_candidates", ())
    if candidates:
        named = ", ".join(f"'{c}'" for c in candidates)
        raise UserError(f"method kto trains on answers labelled good or bad, and no column is named as a label: "
                        f"{named} hold{'s' if len(candidates) == 1 else ''} good / bad values; name it with "
                        f"--label-field {candidates[0]} (data.label_field)")
    found = (f"column '{unread[0]}' holds {', '.join(repr(v) for v in unread[1])}, which spell no good / bad label "
             "(true / false, yes / no, 1 / 0, good / bad, 👍 / 👎 do)" if unread else
             "no good / bad column beside its answers, nor preference pairs")
    raise UserError(f"method kto trains on answers labelled good or bad and this data has none ({found}; qlora-app "
                    "inspect shows its fields; --label-field NAME names the column); pass rows with prompt / "
                    "completion / label, or pairs (qlora-app pairs --dataset DATA --out FOLDER makes them)")


def require_pairs(det) -> None:
    """Method dpo needs preference data: one line naming the fix otherwise."""
    if det.format != "preference" and getattr(det, "desirable_field", None):
        raise UserError(f"method dpo trains on preference pairs and this data is unpaired (one answer per row, "
                        f"'{det.desirable_field}' saying whether it is good, as KTO trains on); pass pairs, or make "
                        "them from a reward: qlora-app pairs --dataset DATA --out FOLDER")
    if det.format != "preference":
        raise UserError("method dpo trains on preference pairs and this data has none (no chosen / rejected answers, "
                        "nor two ranked answers; qlora-app inspect shows its fields); pass pairs, or make them from a "
                        "reward: qlora-app pairs --dataset DATA --out FOLDER")
