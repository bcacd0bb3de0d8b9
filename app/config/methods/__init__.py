"""The training methods, one module each: what the rest of the program asks about a method (its rows, whether it
samples, its reward, its teacher, its defaults, its warnings and checks, its card line, its demo) is answered by the
method's object (base.Method), never by comparing its name (tests/structure/test_methods.py).

    base.py       the Method: its flags and hooks, with the defaults most methods share
    sft.py, grpo.py, dpo.py, orpo.py, kto.py, distill.py   one method each

Adding a method: its module here (and a line in METHODS), its trainer in app/train/methods/ (a line in its
TRAINERS), its preset, its test and its docs (docs/architecture.md, "Adding a method").

Owns: what each method is. Must not import the schema (it imports this) nor anything above app.config."""

from __future__ import annotations

from app.config.methods import distill, dpo, grpo, kto, orpo, sft
from app.config.methods.base import DEFAULT_MODEL, ROW_KINDS, Method  # noqa: F401 - the registry's names

# In the order the UI and --help list them (the first is the default).
METHODS: dict[str, Method] = {m.name: m for m in (grpo.METHOD, sft.METHOD, dpo.METHOD, kto.METHOD, orpo.METHOD,
                                                   distill.METHOD)}
NAMES = tuple(METHODS)
EXPERIMENTAL = tuple(n for n, m in METHODS.items() if m.experimental)
_STABLE = [m.said for m in METHODS.values() if not m.experimental]
# How help and descriptions name the methods: "GRPO, SFT, DPO, KTO and distillation; ORPO experimental".
IN_WORDS = (", ".join(_STABLE[:-1]) + " and " + _STABLE[-1]
            + "".join(f"; {METHODS[m].said} experimental" for m in EXPERIMENTAL))


def method_of(cfg) -> Method:
    """The Method a config trains with."""
    return METHODS[cfg.method]


def named(name: str | None) -> Method | None:
    """The Method of that name (a run's recorded method), None for a name this version does not know."""
    return METHODS.get(name or "")


def with_(flag: str) -> tuple[str, ...]:
    """The names of the methods with ``flag`` set, in METHODS' order: what a message lists ("use --method ...")."""
    return tuple(n for n, m in METHODS.items() if getattr(m, flag))
