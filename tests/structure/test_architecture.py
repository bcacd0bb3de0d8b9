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

from repo_paths import ROOT

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
    ("app.ask",),
    ("app.train", "app.eval", "app.export", "app.synth", "app.teacher"),
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
    raise AssertionError(f"{module} is in no layer of tests/structure/test_architecture.py: place it")


def test_every_module_has_a_layer():
    for m in MODULES:
        if m != "app":
            layer(m)


def test_no_module_imports_a_higher_layer():
    upward = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}"
              for m in MODULES if m != "app" for t, _, line, _, _ in imports(m) if layer(t) > layer(m)]
    assert not upward, "\n".join(upward)


# Within a package, its sub-packages in order, lowest first: a module imports its own sub-package and those below.
SUBLAYERS = {
    "app.train": ("app.train.planning", "app.train.methods", "app.train.running"),
}


def sublayer(module: str) -> tuple[str, int] | None:
    """(the package, the rank of this module's sub-package in it) where the package is split in SUBLAYERS."""
    for package, subs in SUBLAYERS.items():
        for i, sub in enumerate(subs):
            if module == sub or module.startswith(sub + "."):
                return package, i
    return None


def test_split_packages_hold_only_their_sub_packages():
    """app/train/ holds planning/, methods/ and running/ and no module of its own but its __init__."""
    for package, subs in SUBLAYERS.items():
        folder = ROOT / package.replace(".", "/")
        loose = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
        assert not loose, f"{package} holds modules outside its sub-packages {subs}: {loose}"
        dirs = sorted(f"{package}.{d.name}" for d in folder.iterdir() if (d / "__init__.py").exists())
        assert dirs == sorted(subs), dirs


def test_no_module_imports_a_higher_sub_layer():
    """planning never imports methods or running; methods never imports running."""
    upward = []
    for m in MODULES:
        here = sublayer(m)
        if here is None:
            continue
        for t, _, line, _, _ in imports(m):
            there = sublayer(t)
            if there and there[0] == here[0] and there[1] > here[1]:
                upward.append(f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}")
    assert not upward, "\n".join(upward)


def test_the_sub_layer_check_sees_an_upward_import(tmp_path, monkeypatch):
    src = tmp_path / "m.py"
    src.write_text("from app.train.running.session import Session\n")
    monkeypatch.setitem(MODULES, "app.train.planning.fake", src)
    ups = [t for t, *_ in imports("app.train.planning.fake") if sublayer(t)[1] > sublayer("app.train.planning.fake")[1]]
    assert ups == ["app.train.running", "app.train.running.session"]


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
    src.write_text("def f():\n    from app.train.running.session import Session\n")
    monkeypatch.setitem(MODULES, "app.run.store", src)
    found = {(t, local, parent) for t, local, _, _, parent in imports("app.run.store")}
    assert found == {("app.train.running.session", True, False), ("app.train.running", True, True),
                     ("app.train", True, True)}
    assert layer("app.train.running.session") > layer("app.run.store")
    monkeypatch.undo()
    heavy_at_import.cache_clear()
    assert heavy_at_import("app.train.running.callbacks") == {"transformers"}
    assert not heavy_at_import("app.train.running.session")


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
TRAINING = ("app.train.running.session", "app.train.running.launcher", "app.train.running.build",
            "app.train.running.callbacks", "app.train.running.heldout_eval", "app.train.methods.sft",
            "app.train.methods.grpo", "app.train.methods.preference_trainers", "app.train.methods.common")


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
    bad = {m: sorted(t for t in _closure(m) if t in TRAINING or t.startswith(("app.train.methods",
                                                                           "app.train.running")))
           for m in MODULES if m.startswith("app.ui")}
    assert not {m: b for m, b in bad.items() if b}
    assert "app.train.running.session" in _closure("app.cli.main")  # the closure sees what it should


def _session_steps() -> list[str]:
    """The steps Session.run takes, as the code has them (self.<step>() calls; plan_run reads as 'plan')."""
    tree = ast.parse(MODULES["app.train.running.session"].read_text())
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
    """A method added to app/config/methods shows up in the help that lists them; the old two-method wording is
    gone from the code, the description and the docs."""
    from app.config.methods import IN_WORDS as METHODS_IN_WORDS
    from app.config.methods import METHODS

    assert all(m.said in METHODS_IN_WORDS for m in METHODS.values())
    assert METHODS_IN_WORDS in (APP / "__init__.py").read_text()  # the package's own first line
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


# ------------------------------------------------------------------------------------------ one home for each step

def _calls(path: Path) -> list[tuple[int, str]]:
    """(line, the called function's dotted text) of every call in a module."""
    return [(n.lineno, ast.unparse(n.func)) for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]


def _where(test) -> list[str]:
    return sorted(f"{MODULES[m].relative_to(ROOT)}:{line} {text}" for m in MODULES for line, text in
                  _calls(MODULES[m]) if test(text))


def test_one_module_opens_a_runs_model_pair():
    """Loading an adapter onto its base and switching it off for the base side: app/model/pair.py only (compare,
    chat, serve, the harness, pairs and export call it; nothing opens a model through app/eval/compare.py)."""
    opened = _where(lambda t: t.endswith(("PeftModel.from_pretrained", ".disable_adapter")))
    # training from an existing adapter (lora.init_from: trainable, the model that trains) is the LoRA step's
    trains = ("app/model/lora.py:", "app/model/unsloth_backend.py:")
    assert opened and all(w.startswith(("app/model/pair.py:", *trains)) for w in opened), opened
    for w in opened:
        if w.startswith(trains):
            path, line = w.split()[0].split(":")
            assert "is_trainable=True" in (ROOT / path).read_text().splitlines()[int(line) - 1], w
    for m in ("app.eval.chat", "app.serve.engine", "app.eval.harness", "app.synth.pairs", "app.export.bundle",
              "app.serve.vllm_engine", "app.cli.pairs", "app.eval.compare"):
        assert "app.model.pair" in {t for t, *_ in imports(m)}, m


def test_one_module_pads_and_no_one_changes_a_tokenizers_padding():
    """Left padding is app/model/generation.pad_left (as TRL's pad pads); nothing sets a tokenizer's padding or
    truncation side (a tokenizer set to the left here would pad training's batches on the left too), and nothing pads by
    hand into a tensor filled with the pad id."""
    sides = []
    for m, p in MODULES.items():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr in ("padding_side",
                                                 "truncation_side") for t in n.targets):
                sides.append(f"{p.relative_to(ROOT)}:{n.lineno}")
    assert not sides, sides
    padded = _where(lambda t: t in ("pad_sequence", "torch.nn.utils.rnn.pad_sequence", "trl.trainer.utils.pad"))
    assert padded and all(w.startswith("app/model/generation.py:") for w in padded), padded
    by_hand = [w for w in _where(lambda t: t == "torch.full") if "pad" in w]
    text = {m: p.read_text() for m, p in MODULES.items()}
    by_hand += [f"{MODULES[m].relative_to(ROOT)}" for m, s in text.items() if m != "app.model.generation"
                and re.search(r"\[\s*pad\w*\s*\]\s*\*\s*\(", s)]
    assert not by_hand, by_hand


def test_thread_settings_are_made_by_the_entry_points_only():
    """torch's CPU threads are a process-wide setting: the commands set them (app/cli, the UI's actions), a
    training run's session through its governor; compare, chat, serve and the harness as libraries never do."""
    callers = _where(lambda t: t.endswith("use_free_cores"))
    assert callers and all(w.startswith(("app/cli/", "app/ui/")) for w in callers), callers
    governor = _where(lambda t: t.endswith("ThreadGovernor"))
    assert all(w.startswith("app/train/running/session.py:") for w in governor), governor


def test_the_run_callback_takes_one_record_of_counts_and_flushes_it_at_the_end():
    """RunDirCallback takes the run's folder, its stop flag, its counts (app/run/counts.RunCounts) and where it
    reports: no counter of its own per kind; and on_train_end takes the counts since the last logged line."""
    tree = ast.parse(MODULES["app.train.running.callbacks"].read_text())
    cb = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunDirCallback")
    init = next(n for n in cb.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert [a.arg for a in init.args.args] == ["self", "run_dir", "stop", "counts", "report"]
    end = next(n for n in cb.body if isinstance(n, ast.FunctionDef) and n.name == "on_train_end")
    assert "self.counts.take(" in ast.unparse(end) and "append_metrics" in ast.unparse(end)
    # counters made per process and rebound to a run are gone: a run's reward functions are made for the run
    rewards = MODULES["app.rewards"].read_text()
    assert not re.search(r"\bf\.errors = ", rewards) and "f.start(" not in rewards and "count_in(counts)" in rewards


def test_every_dotted_key_is_walked_by_one_function():
    """Reading or writing a dotted config key ("grpo.beta") is app.config.fields.get_key / set_key."""
    walks = []
    for m, p in MODULES.items():
        if m == "app.config.fields":
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.For) and re.search(r"\.split\(['\"]\.['\"]\)", ast.unparse(n.iter)):
                walks.append(f"{p.relative_to(ROOT)}:{n.lineno}")
            if isinstance(n, ast.Assign) and re.search(r"=\s*\w+(\.\w+)*\.split\(['\"]\.['\"]\)$", ast.unparse(n)) \
                    and any(isinstance(t, ast.Starred) for t in getattr(n.targets[0], "elts", [])):
                walks.append(f"{p.relative_to(ROOT)}:{n.lineno}")
    assert not walks, f"dotted keys walked by hand (use app.config.fields.get_key / set_key): {walks}"


def test_the_layer_list_and_package_docstrings_match_the_folders():
    """app/__init__.py names every package in LAYERS order; each package's docstring names each of its modules
    (a module added, moved or removed must be said where a newcomer reads)."""
    doc = ast.get_docstring(ast.parse(MODULES["app"].read_text()))
    listed = re.findall(r"^ {4}(\w[\w, ]*?)\s{2,}", doc, re.M)
    named = [n.strip() for line in listed for n in line.split(",")]
    expected = [n.split(".")[1] for layer_ in LAYERS for n in layer_ if n.count(".") == 1 and n != "app.errors"]
    assert named == expected, (named, expected)
    missing = {}
    for pkg in PACKAGES:
        if pkg == "app":
            continue
        text = ast.get_docstring(ast.parse(MODULES[pkg].read_text())) or ""
        folder = MODULES[pkg].parent
        own = sorted(p.stem if p.is_file() else p.name for p in folder.iterdir()
                     if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists()))
        lacking = [name for name in own if not re.search(rf"\b{name}\b", text)]
        if lacking:
            missing[pkg] = lacking
    assert not missing, f"package docstrings that do not name their modules: {missing}"
