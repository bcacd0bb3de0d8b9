"""Option shapes shared by the command modules, and the one reshaping of argv (`train --explain KEYS`)."""

from __future__ import annotations

import typer
from typer.core import TyperCommand, TyperGroup


def switch(*flags: str, help: str | None = None, **kw):
    """An on/off option. Its type column stays empty: typer's rich help would show '<bool>' beside it
    ('--local-only <bool>'), which reads as if the switch took a value (an empty metavar is what typer shows)."""
    return typer.Option(False, *flags, help=help, metavar="", **kw)


def _no_type(option):
    if option is not None:
        option.metavar = ""  # --help is a switch too: no '<bool>' beside it
    return option


class Command(TyperCommand):
    """Every `qlora-app` command: help as typer draws it, with --help shown as the switch it is."""

    def get_help_option(self, ctx):
        return _no_type(super().get_help_option(ctx))


class Group(TyperGroup):
    """`qlora-app` itself and its command groups (presets, runs), drawn like ``Command``."""

    def get_help_option(self, ctx):
        return _no_type(super().get_help_option(ctx))


def explain_value(argv: list[str]) -> list[str]:
    """`train --explain lora`: a flag that may take a value, which click's options cannot be: the value moves to
    the hidden --explain-only."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--explain" and not out[i + 1].startswith("-"):
            out[i + 1:i + 2] = ["--explain-only", out[i + 1]]
    return out
