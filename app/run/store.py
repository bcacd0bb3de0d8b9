"""Writing a run's files so a crash or a full disk never leaves half of one: atomic replace for status.json and
config.yaml; metrics.jsonl appended a line at a time, read back skipping a torn last line, and cut back to a resumed
step. Only the run's record (app/run/record.py) writes config.yaml and status.json through these."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from app.run.layout import METRICS, RUNNING, STATUS, STATUSES


def write_atomic(path: Path, text: str) -> None:
    """Write a small file atomically: a temporary sibling, flushed, renamed over the old one. The temporary name
    carries the pid: two processes writing the same file (the launchers of a multi-node run on a shared folder)
    must not rename each other's half-written copy away."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temporary left behind
        tmp.unlink(missing_ok=True)
        raise


def write_status(run_dir: Path, status: str | None, **fields) -> dict:
    """Atomic update (write + rename) so a reader tailing the directory never sees half a file. On a full disk
    the temporary copy cannot be written; the file is then rewritten in place (its blocks are already allocated,
    and a dead run must not stay "running"). ``status`` None keeps the status word as it is."""
    data = read_status(run_dir) or {}
    status = status or data.get("status", RUNNING)
    assert status in STATUSES, status
    data.update(fields, status=status, updated=time.time())
    text = json.dumps(data, indent=2)
    path = Path(run_dir) / STATUS
    try:
        write_atomic(path, text)
    except OSError:
        with open(path, "r+" if path.exists() else "w") as f:
            f.write(text)
            f.truncate()
    return data


def read_status(run_dir: Path) -> dict | None:
    p = Path(run_dir) / STATUS
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def append_metrics(run_dir: Path, record: dict) -> None:
    with open(Path(run_dir) / METRICS, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_metrics(run_dir: Path) -> list[dict]:
    """Tolerates a half-written last line (the writer may be mid-append while the UI reads)."""
    out = []
    p = Path(run_dir) / METRICS
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def truncate_metrics(run_dir: Path, step: int) -> int:
    """Drop metrics rows logged after ``step`` (a resume continues from there, so they will be logged again);
    returns how many were dropped. Replaced atomically, so a crash here loses nothing."""
    p = Path(run_dir) / METRICS
    if not p.exists():
        return 0
    keep, dropped = [], 0
    for line in p.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            dropped += 1  # a half-written last line from the crash
            continue
        if isinstance(rec, dict) and (rec.get("step") or 0) > step:
            dropped += 1
        else:
            keep.append(line)
    if dropped:
        write_atomic(p, "".join(line + "\n" for line in keep))
    return dropped


def stamped(folder: Path, prefix: str, when: float) -> Path:
    """A new file name in ``folder`` for a file made at ``when`` (a comparison, an evaluation):
    prefix-YYYYmmdd-HHMMSS[-n].json."""
    folder.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    target, n = folder / f"{prefix}-{stamp}.json", 1
    while target.exists():
        n += 1
        target = folder / f"{prefix}-{stamp}-{n}.json"
    return target
