"""The Unsloth path without a GPU: the extra resolves to a current Unsloth, our floors admit the stack it pins, the
CPU refuses what that stack cannot run, and Unsloth is imported before transformers / trl / peft."""

import subprocess
import sys
import textwrap

import pytest
import tomllib
from packaging.requirements import Requirement
from repo_paths import ROOT

from app.host.stack import CPU_GRPO_FLOORS, stack_problem

# What unsloth 2026.10.9 (the current release) pins; read from its wheel's METADATA on 2026-11-23.
UNSLOTH_PINS = {"transformers": "5.17.0", "trl": "1.15.0", "datasets": "4.8.5"}


def _deps() -> dict[str, Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in meta["dependencies"] + meta["optional-dependencies"]["unsloth"]]
    return {r.name: r for r in reqs}


def test_unsloth_extra_pins_a_current_release_and_our_floors_admit_its_stack():
    deps = _deps()
    assert not deps["unsloth"].specifier.contains("2025.7.2")  # the year-old release pip used to backtrack to
    assert deps["unsloth"].specifier.contains("2026.10.9")
    for name, version in UNSLOTH_PINS.items():
        assert deps[name].specifier.contains(version), (name, version)
    tested = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                  if "==" in line and not line.startswith("#"))
    for name, req in deps.items():  # and the CI-tested set stays inside our own ranges
        if name in tested:
            assert req.specifier.contains(tested[name]), (name, tested[name])


def test_cpu_grpo_on_unsloths_stack_is_refused_in_one_line():
    msg = stack_problem(True, cuda=False, versions={"trl": "1.15.0", "transformers": "5.17.0"})
    assert msg and "\n" not in msg and "trl 1.15.0" in msg and "CUDA GPU" in msg
    assert stack_problem(True, cuda=True, versions={"trl": "1.15.0", "transformers": "5.17.0"}) is None
    assert stack_problem(False, cuda=False, versions={"trl": "1.15.0", "transformers": "5.17.0"}) is None
    assert stack_problem(True, cuda=False, versions=dict(CPU_GRPO_FLOORS)) is None
    assert stack_problem(True, cuda=False) is None  # this (CI-tested) environment


def test_cpu_grpo_refusal_through_the_cli(tmp_path, monkeypatch):
    """The refusal is a clean exit 2 before any model loads."""
    code = textwrap.dedent(f"""
        import importlib.metadata as md, sys
        real = md.version
        md.version = lambda n: {{"trl": "1.15.0", "transformers": "5.17.0"}}.get(n) or real(n)
        sys.argv = ["qlora-app", "train", "--dataset", "arith", "--model", "arith-base", "--local-only",
                    "--output-dir", {str(tmp_path)!r}, "--set", "runtime.device=cpu"]
        from app.cli.main import main
        main()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "GRPO on the CPU needs trl>=1.16" in r.stderr and "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


@pytest.mark.parametrize("cuda, want", [(True, "imported"), (False, "absent")])
def test_unsloth_is_imported_before_transformers_when_the_backend_resolves_to_it(tmp_path, cuda, want):
    fake = tmp_path / "site" / "unsloth"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(textwrap.dedent(f"""
        import sys
        open({str(tmp_path / 'record')!r}, "w").write(
            ",".join(m for m in ("transformers", "trl", "peft") if m in sys.modules) or "first")
    """))
    code = textwrap.dedent(f"""
        import torch
        torch.cuda.is_available = lambda: {cuda}
        import app.host.machine  # the device facts of a (faked) GPU: this torch has no CUDA to query
        app.host.machine.device_facts = lambda setting="auto": {{"cuda": {cuda}, "bf16": {cuda}, "gpu": "a faked GPU",
                                                           "vram_gb": 24.0 if {cuda} else None, "planned": False}}
        from app.config.build import build_config
        from app.errors import UserError
        from app.train.running.session import Session
        try:
            Session(build_config({{"data": {{"dataset": {str(tmp_path / 'none.jsonl')!r}}},
                                        "model": {{"name_or_path": {str(tmp_path / 'no-model')!r}}}}})).run()
        except UserError:
            pass
    """)
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    record = tmp_path / "record"
    if want == "imported":
        assert record.read_text() == "first"  # nothing of transformers / trl / peft was loaded before it
    else:
        assert not record.exists()  # no GPU: the HF backend, and Unsloth is never imported


def test_a_tracker_that_is_not_installed_is_a_user_error(monkeypatch, tmp_path):
    """transformers raises a bare RuntimeError deep in Trainer() for a report_to package that is missing (seen on
    the GPU machine without trackio); the run refuses it first, naming the package, before any run folder."""
    import importlib.util

    from app.config.build import build_config
    from app.errors import UserError
    from app.train.running.session import Session

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    cfg = build_config({"data": {"dataset": "arith"}, "output_dir": str(tmp_path)}, None, ["report_to=[trackio]"])
    with pytest.raises(UserError, match="runtime.report_to names trackio, which is not installed: pip install trackio"):
        Session(cfg).run()
    assert not any(tmp_path.iterdir())
