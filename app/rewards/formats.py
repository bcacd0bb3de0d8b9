"""Format components: the answer is JSON (fitting a JSON Schema, when given), the answer keeps a pattern rule.

Both read the visible answer (``<think>`` removed). Schema files are checked when a run is planned
(``check_schema``: one line, before anything loads); at scoring time a problem is the sample's (None, counted).
"""

from __future__ import annotations

import json
from pathlib import Path

from app.errors import UserError
from app.rewards import answer as A
from app.rewards import json_answer as J
from app.rewards.components import Component

REGEX_TIMEOUT_S = 1.0  # a pattern that backtracks without end on one answer gives that answer None, not a hung run


def _load_schema(path: str) -> dict:
    """The JSON Schema in ``path``, checked against its own metaschema; a problem is one UserError line."""
    from jsonschema import exceptions, validators

    p = Path(path)
    if not p.is_file():
        raise UserError(f"reward.json_schema: no file '{path}'; give the path of a JSON Schema file")
    try:
        schema = json.loads(p.read_text(encoding="utf-8"))
        validators.validator_for(schema).check_schema(schema)
    except (OSError, ValueError) as e:
        raise UserError(f"reward.json_schema: '{path}' is not JSON ({e}); fix the file") from None
    except exceptions.SchemaError as e:
        raise UserError(f"reward.json_schema: '{path}' is not a valid JSON Schema ({e.message}); fix the file") \
            from None
    return schema


def check_schema(path: str | None) -> None:
    """Raise a one-line UserError when ``path`` is set and is not a readable, valid JSON Schema file."""
    if path:
        _load_schema(path)


class JsonReward(Component):
    """1.0 when the answer is JSON that parses (and fits the schema, when one is given); 0.5 when it parses but does
    not fit; 0.0 when there is no JSON or it does not parse.

    >>> j = JsonReward()
    >>> j(['{"name": "Ada", "age": 36}', 'Sure! ```json\\n{"a": 1}\\n```', '{"a": 1,', 'no json here'])
    [1.0, 1.0, 0.0, 0.0]
    """

    name = "json"

    @classmethod
    def from_config(cls, reward_cfg) -> "JsonReward":
        return cls(reward_cfg.json_schema)

    def __init__(self, schema: str | None = None):
        super().__init__()
        self.schema_path = schema
        self._validator = None

    def __getstate__(self):  # the compiled validator is rebuilt from the file on first use
        return {**self.__dict__, "_validator": None}

    def _fits(self, value) -> str | None:
        """None when ``value`` fits the schema, else the first reason it does not."""
        if not self.schema_path:
            return None
        if self._validator is None:
            from jsonschema import validators

            schema = _load_schema(self.schema_path)
            self._validator = validators.validator_for(schema)(schema)
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{where + ': ' if where else ''}{error.message}"[:200]

    def score(self, text, reference):
        candidate = J.json_text(text)
        if candidate is None:
            return 0.0, "no JSON in the answer"
        try:
            value, end = json.JSONDecoder().raw_decode(candidate.strip())
        except ValueError as e:
            return 0.0, f"JSON does not parse: {e}"
        misfit = self._fits(value)
        if misfit:
            return 0.5, f"JSON parses but does not fit the schema: {misfit}"
        return 1.0, "JSON parses" + (" and fits the schema" if self.schema_path else "")


class RegexReward(Component):
    """The share of the pattern rules the answer keeps: it matches ``reward.regex`` (when set) and does not match
    ``reward.regex_forbid`` (when set). Patterns search the visible answer (the `regex` module, with a time bound).

    >>> r = RegexReward(must=r"^\\d{3}-\\d{4}$", forbid=r"(?i)sorry")
    >>> r(["555-1234", "Sorry, 555-1234", "call me"])
    [1.0, 0.0, 0.5]
    """

    name = "regex"

    @classmethod
    def from_config(cls, reward_cfg) -> "RegexReward":
        return cls(reward_cfg.regex, reward_cfg.regex_forbid)

    def __init__(self, must: str | None = None, forbid: str | None = None):
        super().__init__()
        self.must, self.forbid = must, forbid

    def score(self, text, reference):
        import regex

        t = A.strip_think(text).strip()
        kept, why = [], []
        for pattern, wanted in ((self.must, True), (self.forbid, False)):
            if not pattern:
                continue
            found = regex.search(pattern, t, flags=regex.MULTILINE, timeout=REGEX_TIMEOUT_S) is not None
            kept.append(found == wanted)
            why.append(f"{'matches' if found else 'does not match'} {pattern!r}")
        if not kept:
            return None, "no pattern set"
        return sum(kept) / len(kept), "; ".join(why)
