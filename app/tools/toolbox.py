"""The tools a run names, loaded and checked before any model loads: ``tools.use`` entries (a built-in name such as
``calculator``, ``FILE.py`` for every public documented function in the file, or ``FILE.py:fn1,fn2``) and
``tools.environment`` (``FILE.py:Class``, a multi-turn environment whose public methods are its tools).

Each tool must be what TRL and the chat template need: type hints on every argument and a Google-style docstring
with an ``Args:`` entry for each (transformers' ``get_json_schema`` builds the schema the model sees from them).
A missing hint or docstring, two tools of one name, an environment without ``reset`` are one line each (exit 2).
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field
from typing import Callable

from app.errors import UserError
from app.host.usercode import import_target, is_file_target
from app.run.counts import CallCounts, error_text
from app.tools.builtin import BUILTIN_TOOLS
from app.tools.guard import Limits, guarded, guarded_environment, public_methods

# Qwen2.5's words around the schemas, as long as most templates' (for the estimate only)
TOOL_PREAMBLE = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                 "provided with function signatures within <tools></tools> XML tags:\n<tools>\n</tools>\n\n"
                 "For each function call, return a json object with function name and arguments within "
                 "<tool_call></tool_call> XML tags")


@dataclass
class Toolbox:
    """The run's tools: plain functions, an environment class, and where each came from (for messages and cards)."""

    functions: list[Callable] = field(default_factory=list)
    environment: type | None = None
    origins: dict[str, str] = field(default_factory=dict)  # tool name -> "built-in" / "tools.py" / "Env in env.py"

    @property
    def names(self) -> list[str]:
        return list(self.origins)

    def __bool__(self) -> bool:
        return bool(self.functions or self.environment)

    def schemas(self) -> list[dict]:
        """The JSON schemas the chat template renders (standalone tools, then the environment's)."""
        from transformers.utils import get_json_schema  # heavy: only when a run has tools

        fns = list(self.functions) + ([getattr(self.environment, n) for n in public_methods(self.environment)]
                                      if self.environment else [])
        return [get_json_schema(as_tool(f)) for f in fns]

    def prompt_text(self) -> str:
        """About what a chat template adds to a prompt for these tools (their schemas and a preamble), for the
        memory estimate's prompt lengths before the model's tokenizer renders the real thing."""
        import json

        return TOOL_PREAMBLE + "\n".join(json.dumps(s) for s in self.schemas())

    def guarded(self, limits: Limits, stats: CallCounts) -> tuple[list[Callable], type | None]:
        """(tools, environment factory) for TRL and the chat loop, every call guarded (app/tools/guard.py)."""
        return ([guarded(f, limits, stats) for f in self.functions],
                guarded_environment(self.environment, limits, stats) if self.environment else None)


def as_tool(fn: Callable) -> Callable:
    """A function as the model sees it: an environment's method without its ``self`` (bound to a stand-in; only its
    signature and docstring are read, it is never called)."""
    params = list(inspect.signature(fn).parameters)
    return types.MethodType(fn, object()) if params and params[0] == "self" else fn


def _schema_problem(fn: Callable) -> str | None:
    from transformers.utils import get_json_schema  # heavy: only when a run has tools

    fn = as_tool(fn)
    if not (inspect.getdoc(fn) or "").strip():
        return "has no docstring (the model reads what a tool does from it)"
    loose = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if loose:  # a call passes named arguments the schema lists; *args / **kwargs have no schema
        return f"takes *{loose[0]} (the model can only pass the named, typed arguments its schema lists)"
    try:
        get_json_schema(fn)
    except Exception as e:  # noqa: BLE001 - transformers' DocstringParsingException / TypeHintParsingException
        return str(e).splitlines()[0].rstrip(".")
    return None


def check_tool(fn: Callable, where: str) -> None:
    problem = _schema_problem(fn)
    if problem:
        raise UserError(f"tool '{fn.__name__}' in {where}: {problem}; give every argument a type hint and the "
                        "function a Google-style docstring with an Args: line per argument")


def _split(entry: str) -> tuple[str, str]:
    """("tools.py", "") for a whole file; ("tools.py" or "pkg.mod", "fn1,fn2") for named functions."""
    if entry.endswith(".py") or ":" not in entry:
        return entry, ""
    target, names = entry.rsplit(":", 1)  # rsplit: a Windows path has its own colon
    return target, names


def _from_file(entry: str) -> list[tuple[Callable, str]]:
    target, names = _split(entry)
    module = import_target(target, "tool", entry)
    where = target
    if names:
        out = []
        for n in (x.strip() for x in names.split(",")):
            fn = getattr(module, n, None)
            if fn is None or not callable(fn):
                raise UserError(f"tools '{entry}': {where} has no function '{n}'")
            out.append((fn, where))
        return out
    # every public function defined in the file itself (not the ones it imports)
    found = [(fn, where) for n, fn in inspect.getmembers(module, inspect.isfunction)
             if not n.startswith("_") and fn.__module__ == module.__name__]
    if not found:
        raise UserError(f"tool file '{where}' defines no public function; write one (typed, with a docstring) or "
                        "name them as FILE.py:fn1,fn2")
    return found


def try_environment(cls: type, row: dict | None = None) -> None:
    """TRL makes each rollout's environment with no arguments and resets it with the training row: both are tried
    once before the model loads (``row``: the first training row, once the data is read), so an environment that
    cannot be made or reset is one line, not a traceback after the model has loaded."""
    try:
        env = cls()
    except Exception as e:  # noqa: BLE001 - the user's code: any failure is one line
        raise UserError(f"environment {cls.__name__}() failed ({error_text(e)}): TRL makes each environment with no "
                        "arguments; give __init__'s parameters defaults, or read what a row needs in "
                        "reset(self, **row)") from None
    if row is None:
        return
    try:
        env.reset(**row)
    except Exception as e:  # noqa: BLE001
        raise UserError(f"environment {cls.__name__}.reset() failed on the first training row ({error_text(e)}); "
                        f"reset(self, **row) gets the row's columns ({', '.join(row)}): fix it to take them") from None


def load_environment(entry: str) -> type:
    if ":" not in entry or entry.endswith(".py"):
        raise UserError(f"--environment '{entry}' must look like 'path/to/file.py:ClassName'")
    target, cls_name = entry.rsplit(":", 1)
    module = import_target(target, "environment", entry)
    cls = getattr(module, cls_name, None)
    if not inspect.isclass(cls):
        raise UserError(f"environment '{entry}': {target} has no class '{cls_name}'")
    if not callable(getattr(cls, "reset", None)):
        raise UserError(f"environment {cls_name} in {target} has no reset() method; add reset(self, **row) "
                        "(it may return text to append to the prompt)")
    if not public_methods(cls):
        raise UserError(f"environment {cls_name} in {target} has no public method for the model to call; its "
                        "tools are its public methods (typed, with docstrings)")
    return cls


def load_toolbox(tools_cfg) -> Toolbox:
    """The run's Toolbox from its ToolsConfig, every tool checked (UserError on the first problem)."""
    box = Toolbox()

    def add(fn: Callable, origin: str, name: str | None = None) -> None:
        name = name or fn.__name__
        if name in box.origins:
            raise UserError(f"two tools are named '{name}' ({box.origins[name]} and {origin}); rename one or "
                            "leave one out")
        box.origins[name] = origin

    for entry in tools_cfg.use:
        entry = entry.strip()
        if entry in BUILTIN_TOOLS:
            fn = BUILTIN_TOOLS[entry]
            add(fn, "built-in")
            box.functions.append(fn)
            continue
        target, names = _split(entry)
        if not names and not is_file_target(target):
            known = ", ".join(BUILTIN_TOOLS)
            raise UserError(f"tool '{entry}' is neither a built-in tool ({known}) nor a .py file; pass "
                            "--tools calculator, --tools FILE.py or --tools FILE.py:fn1,fn2 (or module:fn)")
        for fn, where in _from_file(entry):
            check_tool(fn, where)
            add(fn, where)
            box.functions.append(fn)
    if tools_cfg.environment:
        cls = load_environment(tools_cfg.environment)
        where = f"{cls.__name__} in {tools_cfg.environment.rsplit(':', 1)[0]}"
        for n in public_methods(cls):
            check_tool(getattr(cls, n), where)
            add(getattr(cls, n), where, name=n)
        box.environment = cls
    return box
