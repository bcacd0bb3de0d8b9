"""The building blocks of every config section: strict models (an unknown key is an error), described fields (the
help text `--explain` and the UI's tooltips show) and the value types several sections share.

Only pydantic at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

_MISSING = object()


def get_key(node, dotted: str, default=_MISSING):
    """The value at a dotted key ("reward.judge.url") of a config, a section or their dict form: the one walk of
    a dotted key (every reader of keys uses it; app/config/keys.py imports the schema these sections build, so the
    walk lives here, below both). A key that is not there: ``default`` when given, else KeyError."""
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif not isinstance(node, dict) and hasattr(node, part):
            node = getattr(node, part)
        elif default is not _MISSING:
            return default
        else:
            raise KeyError(dotted)
    return node


def set_key(data: dict, dotted: str, value) -> dict:
    """Set a dotted key in a config's dict form, making the sections on the way ({"grpo": {"beta": 0.1}}); returns
    ``data``. The one write of a dotted key."""
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return data


class StrictModel(BaseModel):
    """Base for every section: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __eq__(self, other) -> bool:
        # what a config says, not what building it noted (private attributes: where values came from, notes)
        return type(self) is type(other) and self.__dict__ == other.__dict__


def _auto_is_empty(v):
    return None if isinstance(v, str) and v.strip().lower() == "auto" else v


def _one_is_a_list(v):
    """--set reward.custom=file.py:fn means a list of that one entry."""
    return [v] if isinstance(v, str) else v


# A switch whose empty value means auto; `auto` itself is accepted too (--set grpo.use_vllm=auto).
AutoBool = Annotated[bool | None, BeforeValidator(_auto_is_empty)]


def _d(default, description: str, **kw):
    """A field with the help text `train --dry-run --explain` and the UI's tooltips show."""
    return Field(default, description=description, **kw)
