"""Other processes: whether one lives, the ones below it, the environment a `python -m app.cli` child gets, and
this process's rank among torchrun's workers.

Owns: process checks for status.json's writer, the UI's job and the torchrun launcher. Must not import anything but
the standard library (the CLI, the UI and the readers of run folders all use it).
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid) -> bool:
    """Whether a process with this pid exists (a status.json's writer, a UI's job)."""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
        return True
    except PermissionError:  # it exists, owned by someone else
        return True
    except (OSError, TypeError, ValueError):
        return False


def child_env() -> dict[str, str]:
    """The environment for a `python -m app.cli` child (the UI's training run, torchrun's workers): this process's,
    with this `app` package first on PYTHONPATH, so the child imports the same code from any working folder."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding app/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first), from /proc; empty where /proc is not there."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children.get(p, [])
    return out


# torchrun's environment for each worker (app/train/running/torchrun.py starts them); 0 of 1 outside torchrun
def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """Rank 0: the one process that writes the run directory, logs and shows progress."""
    return rank() == 0
