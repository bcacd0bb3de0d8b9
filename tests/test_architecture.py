"""The import graph of app/: layered, without cycles, function-local imports counted.

Every `import` and `from ... import` is parsed, including those inside functions (they hide the real graph), and
importing `app.a.b` counts as importing the package `app.a` too (Python runs its __init__ first). A function-local
import of `app.*` is allowed only where it keeps a heavy library (torch, transformers, trl, peft, gradio, datasets,
...) out of the importing module, and says why in a comment.
"""

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
HEAVY = {"torch", "transformers", "trl", "peft", "gradio", "datasets", "matplotlib", "bitsandbytes", "accelerate",
         "math_verify", "numpy", "pandas", "pyarrow", "huggingface_hub", "safetensors", "trackio", "unsloth",
         "vllm", "fastapi", "uvicorn"}

# Lowest first. A module may import its own layer and the ones below, never one above.
LAYERS = (
    ("app.errors", "app.host"),
    ("app.config",),
    ("app.run",),
    ("app.data", "app.rewards", "app.model", "app.tools"),
    ("app.train", "app.eval", "app.export"),
    ("app.demo", "app.ui", "app.serve"),
    ("app.cli",),
)


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in APP.rglob("*.py")}


def _resolve(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports(module: str) -> list[tuple[str, bool, int, str, bool]]:
    """(imported app module, inside a function?, line, the statement's text with the line above it, whether it is
    only a package that the import runs first)."""
    path = MODULES[module]
    text = path.read_text()
    lines = text.splitlines()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []

    def visit(node, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        parts = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        base = ".".join(parts + ([base] if base else []))
                    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in child.names]
                else:
                    names = [a.name for a in child.names]
                where = "\n".join(lines[max(0, child.lineno - 2): child.end_lineno])
                for n in names:
                    if n.split(".")[0] != "app":
                        continue
                    target = _resolve(n)
                    parents = [".".join(target.split(".")[:i]) for i in range(2, target.count(".") + 1)]
                    for t in [*parents, target]:
                        # a package this module sits in is already running its __init__: no edge to it
                        if t != module and not module.startswith(t + "."):
                            out.append((t, local, child.lineno, where, t != target))
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(text), False)
    return out


def _top_level(node):
    """The nodes that run when the module is imported: everything but function bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield child
        yield from _top_level(child)


@functools.lru_cache(maxsize=None)
def heavy_at_import(module: str) -> frozenset[str]:
    """The heavy libraries that importing ``module`` loads: its top-level imports, then those of the app modules
    it imports (the graph has no cycle: test_no_import_cycle_counting_function_local_imports)."""
    libs = set()
    for node in _top_level(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            libs |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            libs.add(node.module.split(".")[0])
    heavy = libs & HEAVY
    for target, local, *_ in imports(module):
        if not local:
            heavy |= heavy_at_import(target)
    return frozenset(heavy)


def layer(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    raise AssertionError(f"{module} is in no layer of tests/test_architecture.py: place it")


def test_every_module_has_a_layer():
    for m in MODULES:
        if m != "app":
            layer(m)


def test_no_module_imports_a_higher_layer():
    upward = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}"
              for m in MODULES if m != "app" for t, _, line, _, _ in imports(m) if layer(t) > layer(m)]
    assert not upward, "\n".join(upward)


def test_no_import_cycle_counting_function_local_imports():
    graph = {m: {t for t, *_ in imports(m)} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def strongconnect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert not cycles, f"import cycles: {cycles}"


def test_function_local_app_imports_only_keep_heavy_libraries_out():
    bad, statements = [], set()
    for m in MODULES:
        for target, local, line, where, parent in imports(m):
            if not local or parent:
                continue
            statements.add((m, line))
            at = f"{MODULES[m].relative_to(ROOT)}:{line}"
            if not heavy_at_import(target):
                bad.append(f"{at} imports {target} inside a function, yet it loads no heavy library: import at the top")
            elif "#" not in where:
                bad.append(f"{at}: say in a comment why {target} is imported inside a function")
    assert not bad, "\n".join(bad)
    assert len(statements) <= 5, f"{len(statements)} function-local app import statements: {sorted(statements)}"


def test_the_graph_checks_see_hidden_imports(tmp_path, monkeypatch):
    """A function-local upward import is seen, with the package it runs first, and is flagged as upward."""
    heavy_at_import.cache_clear()
    src = tmp_path / "rundir.py"
    src.write_text("def f():\n    from app.train.session import Session\n")
    monkeypatch.setitem(MODULES, "app.run.store", src)
    found = {(t, local, parent) for t, local, _, _, parent in imports("app.run.store")}
    assert found == {("app.train.session", True, False), ("app.train", True, True)}
    assert layer("app.train.session") > layer("app.run.store")
    monkeypatch.undo()
    heavy_at_import.cache_clear()
    assert heavy_at_import("app.train.callbacks") == {"transformers"} and not heavy_at_import("app.train.session")


# ------------------------------------------------------------------------------------------- process-wide effects

# Where a process-wide setting may be made: app/host/ (called by the entry points), nowhere else.
PROCESS_WIDE_HOME = "app.host"
ENV_MUTATORS = {"update", "setdefault", "pop", "clear", "popitem", "__setitem__", "__delitem__"}
WARNING_FILTERS = {"filterwarnings", "simplefilter", "resetwarnings"}


def _library_names(tree) -> set[str]:
    """Names a module binds to another library's modules or objects (``import torch``, ``from typer.core import
    TyperOption``, ``import datasets.config as dcfg``), at any depth."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names if a.name.split(".")[0] != "app"}
        elif isinstance(n, ast.ImportFrom) and not n.level and n.module and n.module.split(".")[0] != "app":
            out |= {a.asname or a.name for a in n.names}
    return out - {"annotations"}


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def process_wide_effects(path: Path) -> list[str]:
    """Each place a module changes os.environ, the warnings filters, or an attribute of another library."""
    tree = ast.parse(path.read_text())
    libs = _library_names(tree)
    found = []
    for n in ast.walk(tree):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign,
                                                                                           ast.AnnAssign)) else []
        if isinstance(n, ast.Delete):
            targets = n.targets
        for t in targets:
            # sys.modules[name] = module is how a user's file is imported (app.host.usercode), not a patch
            if (isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in libs
                    and not ast.unparse(t).startswith("sys.modules[")):
                found.append(f"{n.lineno}: sets {ast.unparse(t)}")
        if isinstance(n, ast.Call):
            f = n.func
            text = ast.unparse(f)
            if isinstance(f, ast.Attribute) and f.attr in ENV_MUTATORS and ast.unparse(f.value) == "os.environ":
                found.append(f"{n.lineno}: {text}")
            elif text in ("os.putenv", "os.unsetenv") or (isinstance(f, ast.Attribute) and f.attr in WARNING_FILTERS
                                                          and ast.unparse(f.value) == "warnings"):
                found.append(f"{n.lineno}: {text}")
            elif text == "setattr" and n.args and _root(n.args[0]) in libs:
                found.append(f"{n.lineno}: setattr({ast.unparse(n.args[0])}, ...)")
    return found


def test_process_wide_settings_live_in_app_host_only():
    """No module but app/host/'s changes the environment, the warnings filters or another library's attributes;
    the entry points call app/host (app/cli/main.py's main, compare_base_vs_lora.py)."""
    bad = {m: e for m in MODULES if m != PROCESS_WIDE_HOME and not m.startswith(PROCESS_WIDE_HOME + ".")
           and (e := process_wide_effects(MODULES[m]))}
    assert not bad, bad
    assert process_wide_effects(MODULES["app.host.process"])  # the scan sees what app/host does
    script = (ROOT / "compare_base_vs_lora.py").read_text()
    assert "start_command()" in script and "start_command()" in MODULES["app.cli.main"].read_text()


def test_the_process_wide_scan_sees_each_kind(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os, warnings\nimport torch\nfrom typer.core import TyperOption\n"
                   "def f():\n    os.environ['A'] = '1'\n    os.environ.setdefault('B', '1')\n"
                   "    warnings.filterwarnings('ignore')\n    TyperOption.display_type_rich = None\n"
                   "    setattr(torch, 'x', 1)\n    self_ok = {}\n    self_ok['a'] = 1\n")
    assert [e.split(":")[0] for e in process_wide_effects(src)] == ["5", "8", "6", "7", "9"]


# ------------------------------------------------------------------------------------------------ the front door

PACKAGES = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")
# What the UI must never load, even through another module: the session and the trainers.
TRAINING = ("app.train.session", "app.train.launcher", "app.train.build", "app.train.sft", "app.train.grpo",
            "app.train.dpo", "app.train.callbacks", "app.train.heldout_eval", "app.train.common")


def test_the_app_root_holds_packages_and_at_most_five_modules():
    root = sorted(p.name for p in APP.glob("*.py"))
    assert len(root) <= 5, root
    clashes = [p.name for p in APP.glob("*.py") if (APP / p.stem).is_dir()]
    assert not clashes, f"a module shares its name with a folder: {clashes}"


def test_every_package_says_what_it_owns_and_must_not_do():
    missing = []
    for m in PACKAGES:
        doc = ast.get_docstring(ast.parse(MODULES[m].read_text())) or ""
        if m != "app" and not ("Owns" in doc and "ust not" in doc):
            missing.append(m)
    assert not missing, f"packages whose __init__ docstring does not say what they own and must not do: {missing}"


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        for t, *_ in imports(m):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_the_ui_imports_neither_the_session_nor_the_trainers():
    """Not even through another module, nor inside a function: the UI runs the CLI in a subprocess."""
    bad = {m: sorted(_closure(m) & set(TRAINING)) for m in MODULES if m.startswith("app.ui")}
    assert not {m: b for m, b in bad.items() if b}
    assert "app.train.session" in _closure("app.cli.main")  # the closure sees what it should


def _session_steps() -> list[str]:
    """The steps Session.run takes, as the code has them (self.<step>() calls; plan_run reads as 'plan')."""
    tree = ast.parse(MODULES["app.train.session"].read_text())
    run = next(n for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "Session"
               for n in c.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    steps = [n.func.attr for n in ast.walk(run) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    return list(dict.fromkeys(s.removesuffix("_run") for s in steps if s != "recording"))


def test_the_architecture_doc_names_every_package_and_session_step():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    steps = _session_steps()
    assert {"open", "plan", "create", "build", "train", "step_down", "evaluate", "prove", "close"} <= set(steps)
    diagram = doc[doc.index("Session.run()"):]
    missing = [s for s in steps if not re.search(rf"^\s+{s}\s", diagram, re.M)]
    assert not missing, f"docs/architecture.md's session diagram lacks {missing}"
    packages = [m for m in PACKAGES if m.count(".") == 1]
    missing = [m for m in packages if f"`{m.replace('.', '/')}/`" not in doc]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_methods_are_named_together_wherever_they_are_listed():
    """A method added to config.schema.METHODS shows up in the help that lists them; the old two-method wording is
    gone from the code, the description and the docs."""
    from app.config.schema import METHODS, METHODS_IN_WORDS

    assert all(m.upper() in METHODS_IN_WORDS for m in METHODS)
    texts = [*APP.rglob("*.py"), ROOT / "pyproject.toml", ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    stale = [str(p.relative_to(ROOT)) for p in texts if re.search(r"\bSFT (and|or) GRPO\b", p.read_text())]
    assert not stale, stale
    import typer.main

    from app.cli.main import app

    cli = typer.main.get_command(app)
    train = cli.commands["train"]
    assert METHODS_IN_WORDS in cli.help and METHODS_IN_WORDS in train.help
    method = next(p for p in train.params if p.name == "method")
    assert all(f"{m}: " in method.help for m in METHODS)


def test_each_method_default_is_stated_in_the_help_of_its_key():
    from app.config.help import BY_METHOD, key_help, method_defaults
    from app.config.schema import METHODS

    help_ = key_help()
    for key, values in method_defaults().items():
        assert set(values) == set(METHODS)
        for m, v in values.items():
            if not (BY_METHOD[key] or "").startswith(m + ":"):
                assert f"{m} {v:g}" in help_[key] if isinstance(v, float) else f"{m} {v}" in help_[key], (key, m)
    assert "dpo 1e-05" in help_["training.learning_rate"] and "DPOConfig" in help_["training.extra_args"]
