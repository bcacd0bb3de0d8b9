"""One home for each fact: the reward registry is the only place component names and default weights live; the
comparison code and the trainer do not import each other; runtime.device drives where a model goes; presets ship
with a non-editable install."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli
from repo_paths import ROOT

from app.config import reward_components as registry
from app.errors import UserError

APP = ROOT / "app"


def _name_lists(path: Path, names: set[str]) -> list[list[str]]:
    """Literal tuples / lists / sets / dict keys holding two or more component names: a copy of the registry."""
    found = []
    for n in ast.walk(ast.parse(path.read_text())):
        elts = n.keys if isinstance(n, ast.Dict) else n.elts if isinstance(n, (ast.Tuple, ast.List, ast.Set)) else []
        hits = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
        if len(hits) >= 2:
            found.append(hits)
    return found


def test_only_the_registry_lists_the_reward_components():
    names = set(registry.NAMES)
    # The modules that used to carry their own lists of names or weights.
    # (app/data is left out: its column-name vocabulary has words like "length" and "format" as column names)
    readers = [p for p in APP.rglob("*.py") if p.name != "reward_components.py" and "data" not in p.parts]
    assert len(readers) > 40
    for path in readers:
        lists = _name_lists(path, names)
        assert not lists, f"{path.relative_to(ROOT)} has its own list of reward components: {lists}"


def test_every_reader_follows_the_registry():
    from app.config.schema import RewardConfig
    from app.rewards import _CLASSES, build_reward_funcs, effective_weights
    from app.run.curves import _COLOURS
    from app.ui import handlers as h

    assert set(_CLASSES) == set(registry.NAMES)
    assert RewardConfig().weights == {c.name: c.weight for c in registry.COMPONENTS if c.default_on}
    every = RewardConfig(accuracy=True, weights={"json": 1.0}, regex="x", judge={"url": "http://127.0.0.1:9/v1"})
    funcs, weights = build_reward_funcs(every, has_reference=True)
    assert [f.__name__ for f in funcs] == list(registry.NAMES)
    assert weights == [c.weight for c in registry.COMPONENTS]
    no_ref = [f.__name__ for f in build_reward_funcs(every, has_reference=False)[0]]
    assert no_ref == [c.name for c in registry.COMPONENTS if not c.needs_reference]
    assert list(h.WEIGHTS.values()) == list(registry.NAMES)  # a slider per component, accuracy included
    assert _COLOURS == {c.name: c.colour for c in registry.COMPONENTS}  # curves.png and the UI: one figure
    assert effective_weights()["accuracy"] == 0.0 and effective_weights(RewardConfig(accuracy=True))["accuracy"] == 1.0
    with pytest.raises(Exception, match="did you mean 'format'"):
        RewardConfig(weights={"formatt": 1.0})


def test_docs_describe_every_registry_component_with_its_default_weight():
    doc = (ROOT / "docs" / "rewards.md").read_text()
    for c in registry.COMPONENTS:
        assert re.search(rf"^\| `{c.name}`", doc, re.M), f"docs/rewards.md has no row for {c.name}"
    formula = " + ".join(f"{c.weight:g} * {c.name}" for c in registry.COMPONENTS if c.default_on)
    assert f"total = {formula}" in doc


def _imports(path: Path) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom) and n.module:
            out.add(n.module)
        elif isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
    return out


def test_no_import_circles_between_eval_and_train():
    # One direction only: training evaluates held-out rows through compare's own generation (app.ask.asking: with
    # the run's tools for a tool run) and scoring (one evaluator; a distillation run's divergence from its teacher on
    # the same answers; each point's interval by the proof's own statistics), and the comparison code never imports
    # the trainer.
    allowed = {"app.eval", "app.eval.compare", "app.eval.heldout", "app.eval.result", "app.eval.preference",
               "app.ask.asking", "app.eval.divergence", "app.eval.uncertainty"}
    for path in (APP / "train").rglob("*.py"):
        bad = {m for m in _imports(path) if m.startswith("app.eval") and m not in allowed}
        assert not bad, f"{path.relative_to(ROOT)} imports more of the comparison code than its evaluator {bad}"
    for path in (APP / "eval").rglob("*.py"):
        bad = {m for m in _imports(path) if m.startswith("app.train")}
        assert not bad, f"{path.relative_to(ROOT)} imports the trainer {bad}"
    # render reads the result, never the engine that produced it
    assert not {m for m in _imports(APP / "eval" / "render.py") if m == "app.eval.compare"}


def test_runtime_device_decides_where_a_run_goes(monkeypatch):
    import torch

    from app.host.machine import device_facts, use_cuda

    assert use_cuda("cpu", True) is False and use_cuda("auto", True) is True and use_cuda("auto", False) is False
    with pytest.raises(UserError, match="runtime.device=cuda"):
        use_cuda("cuda", False)
    # On a GPU machine, runtime.device=cpu must keep every decision on the CPU branch (and not query the GPU).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: pytest.fail("queried the GPU"))
    assert device_facts("cpu") == {"cuda": False, "bf16": False, "gpu": None, "vram_gb": None, "planned": False}


@pytest.mark.slow
def test_runtime_device_cpu_keeps_a_run_on_cpu(tiny_model, monkeypatch):
    """A GPU that torch reports (patched here) is not used when the config says cpu: the 4-bit model loads on the
    CPU with fp32 compute, and the trainer arguments say use_cpu."""
    import bitsandbytes  # noqa: F401 - picks its backends at import, before the GPU is faked below
    import torch

    from app.config.build import build_config
    from app.config.schema import ModelConfig
    from app.model.load import load_base_model
    from app.train.methods.args import common_kwargs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: pytest.fail("queried the GPU"))
    model, _, info = load_base_model(ModelConfig(name_or_path=str(tiny_model)), local_only=True, device="cpu")
    assert info["cuda"] is False and info["compute_dtype"] == "fp32"
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    kw = common_kwargs(build_config(sets=["runtime.device=cpu"]), Path("/tmp/x"), info["compute_dtype"], info["cuda"])
    assert kw["use_cpu"] and not kw["bf16"] and kw["optim"] == "adamw_torch"


@pytest.mark.slow
def test_non_editable_install_lists_and_uses_presets(tmp_path):
    """`pip install .` (a wheel, not a link to this checkout) still has every preset.

    Installed with this interpreter's own pip and setuptools (the dev extra asks for one that builds wheels) into a
    folder of its own, not a nested virtualenv: a venv made from inside a venv sees the base interpreter's
    packages, whose setuptools may be too old to build a wheel (Python 3.11's venv bundles 65.5)."""
    import shutil

    site = tmp_path / "site"
    build = tmp_path / "src"  # a copy: building must not write into this checkout
    shutil.copytree(ROOT, build, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "*.egg-info", "build", "__pycache__", "runs", "demo-runs", ".pytest_cache"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(build)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    # From an empty folder with the installed copy first on the path: neither this checkout nor the editable
    # install (its finder comes after the path) can be what is imported. Other PYTHONPATH entries stay (where the
    # dependencies live when they were installed with --target, as on the GPU machine: ../shared/gpu/README.md),
    # except this checkout itself.
    kept = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if e and Path(e).resolve() != ROOT.resolve()]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join([str(site), *kept])}
    code = ("import app, app.config.presets as p; print(app.__file__);"
            "print(sorted(x['name'] for x in p.list_presets()));"
            "from app.config.build import build_config; print(build_config(p.load_preset('gsm8k-grpo')).method)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    where, names, method = r.stdout.splitlines()[-3:]
    assert str(site) in where and str(ROOT) not in where
    from app.config.presets import list_presets

    assert eval(names) == sorted(x["name"] for x in list_presets()) and len(eval(names)) >= 9
    assert method == "grpo"
    r = cli("presets", "show", "demo-grpo", timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("# qlora-app train --preset demo-grpo"), r.stderr[-2000:]


def test_a_test_starts_the_cli_one_way():
    """conftest.cli (a process), conftest.cli_here (this process) and conftest.cli_command (a Popen's argv) are the
    ways a test runs `qlora-app`: one place says how a process gets this checkout's app (PYTHONPATH)."""
    tests = ROOT / "tests"
    stray = [f"{p.relative_to(ROOT)}:{i}" for p in sorted(tests.rglob("*.py")) if p.name != "conftest.py"
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"""sys\.executable,\s*["']-m["'],\s*["']app\.cli["']""", line)]
    assert not stray, f"start the CLI through conftest.cli / cli_command: {stray}"
