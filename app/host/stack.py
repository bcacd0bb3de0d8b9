"""The library versions a job needs on this machine: GRPO on a CPU needs trl >= 1.16 and transformers >= 5.23
(the versions Unsloth pins fail there), refused in one line before anything loads."""

from __future__ import annotations

# The versions whose GRPO runs on a CPU (trl 1.15 + transformers 5.17, which current Unsloth pins, fail there).
CPU_GRPO_FLOORS = {"trl": "1.16", "transformers": "5.23"}


def stack_problem(rollouts: bool, cuda: bool, versions: dict[str, str] | None = None) -> str | None:
    """A one-line refusal when the installed stack cannot run this job here, else None. ``rollouts``: the method
    samples and scores its own answers as GRPO does (app/config/methods/); on a CPU that needs CPU_GRPO_FLOORS, and
    Unsloth's own pins (trl <= 1.15, transformers <= 5.17) fall below them."""
    from packaging.version import Version

    if not rollouts or cuda:
        return None
    if versions is None:
        import importlib.metadata as md

        versions = {name: md.version(name) for name in CPU_GRPO_FLOORS}
    low = [f"{name} {versions[name]}" for name, floor in CPU_GRPO_FLOORS.items()
           if Version(versions[name]) < Version(floor)]
    if not low:
        return None
    need = " and ".join(f"{n}>={v}" for n, v in CPU_GRPO_FLOORS.items())
    return (f"GRPO on the CPU needs {need}, and this environment has {', '.join(low)} (the versions Unsloth pins): "
            "run it on a CUDA GPU, or in an environment installed with -c constraints.txt")
