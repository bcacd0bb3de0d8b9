"""A method is one object in one module (app/config/methods/): nothing else in app/ compares a method's name.

Read from the source (ast), so a new comparison anywhere fails here with its file and line: `cfg.method == "grpo"`,
`method in ("dpo", "orpo")`, `"kto" != f.method`, and a table keyed by method names ({"grpo": ..., "distill": ...})
that decides per method outside the registry."""

import ast

from repo_paths import ROOT

from app.config.methods import METHODS

APP = ROOT / "app"
# The registry itself, and the trainer table keyed by the same names (tests/train/methods/test_registry.py pairs them)
ALLOWED = {"app/config/methods", "app/train/methods/registry.py"}


def _names_method(node) -> bool:
    """An expression that is a method's name: `method`, `x.method`, `x["method"]`."""
    if isinstance(node, ast.Name):
        return node.id == "method"
    if isinstance(node, ast.Attribute):
        return node.attr == "method"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "method"
    return False


def _is_method_literal(node) -> bool:
    """A method's name as a literal, or a tuple / list / set of them."""
    if isinstance(node, ast.Constant):
        return node.value in METHODS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(isinstance(e, ast.Constant) and e.value in METHODS for e in node.elts)
    return False


def comparisons(text: str) -> list[tuple[int, str]]:
    """(line, source) of every comparison of a method's name and every table keyed by two or more of them."""
    tree, lines, out = ast.parse(text), text.splitlines(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            # a literal name decides per method; so does membership of a method in a list of some of them (the
            # registry's own METHODS is the check that a name exists). Two methods compared (the same choice as
            # before?) decide nothing per method.
            listed = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and _names_method(node.left) and not (
                isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == "METHODS")
            if listed or any(_is_method_literal(s) for s in sides):
                out.append((node.lineno, lines[node.lineno - 1].strip()))
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in METHODS]
            if len(keys) >= 2:
                out.append((node.lineno, lines[node.lineno - 1].strip()))
    return out


def test_nothing_outside_the_registry_compares_a_method_name():
    found = []
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel == a or rel.startswith(a + "/") for a in ALLOWED):
            continue
        found += [f"{rel}:{line}: {src}" for line, src in comparisons(path.read_text())]
    assert not found, ("ask the method (app/config/methods/: method_of(cfg).rewarded, .samples, .rows, ...) instead "
                       "of comparing its name:\n" + "\n".join(found))


def test_the_check_sees_each_way_of_comparing():
    """The rule itself: each spelling is found, and what is not a method's name is left alone."""
    caught = ['if cfg.method == "grpo": pass', 'x = method in ("dpo", "orpo")', 'y = "kto" != f.method',
              'z = d["method"] == "sft"', 'T = {"grpo": 1, "distill": 2}', 'w = kind in ("sft", "dpo")',
              'v = cfg.method in PREFERENCE_METHODS']
    for src in caught:
        assert comparisons(src), src
    left = ['if cfg.method_name == x: pass', 'k = kind == "pair"', 'T = {"grpo": 1, "base": 2}',
            'u = loss in ("sigmoid", "hinge")', 'name = cfg.method.upper()', 'same = old["method"] == method',
            'known = cfg.method in METHODS']
    for src in left:
        assert not comparisons(src), src
