"""An off-policy run's teacher answers, kept in its run folder (``teacher-answers.jsonl``): the teacher answers each
training prompt once, greedily, and each answer is written with its top-k as soon as it comes back (a line per
prompt, fsynced), so a killed run loses none it already paid for and ``--resume`` asks only for the rest; a later run
of the same teacher and settings in the same output folder starts from what an earlier one wrote (its lines copied
in, keyed by the prompt's token ids: other data simply matches fewer).

The first line says whose answers they are (``fingerprint``: the teacher, k, the answer budget, its system prompt);
a file with another fingerprint is not read. A torn last line (a kill mid-write) is skipped.

Owns the file. Must not ask the teacher (client.py) nor train.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from app.teacher.client import Scored

FILE = "teacher-answers.jsonl"


def prompt_key(ids) -> str:
    return hashlib.sha256(",".join(str(int(t)) for t in ids).encode()).hexdigest()[:24]


class Answers:
    """``path``'s answers (prompt key -> Scored) for ``fingerprint``."""

    def __init__(self, path: Path, fingerprint: dict):
        self.path, self.fingerprint = Path(path), fingerprint
        known = _read(self.path, fingerprint)
        if known is None:  # another teacher's or settings' answers: not these; asked again
            self.path.unlink()
        self.known: dict[str, Scored] = known or {}
        self.reused = 0  # answers copied from an earlier run's file

    def reuse(self, output_dir: Path) -> int:
        """Answers an earlier run under ``output_dir`` wrote for the same fingerprint, copied in; how many."""
        found = 0
        for other in sorted(Path(output_dir).glob(f"*/{FILE}")):
            if other.resolve() == self.path.resolve():
                continue
            new = {k: v for k, v in (_read(other, self.fingerprint) or {}).items() if k not in self.known}
            for key, scored in new.items():
                self.add(key, scored)
            found += len(new)
        self.reused += found
        return found

    def add(self, key: str, scored: Scored) -> None:
        fresh = not self.path.is_file() or self.path.stat().st_size == 0
        with open(self.path, "a", encoding="utf-8") as f:
            if fresh:
                f.write(json.dumps({"fingerprint": self.fingerprint}) + "\n")
            f.write(json.dumps({"key": key, **scored.to_dict()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.known[key] = scored

    def get(self, key: str) -> Scored | None:
        return self.known.get(key)


def _read(path: Path, fingerprint: dict) -> dict[str, Scored] | None:
    """The answers in ``path``; None when they are for another fingerprint."""
    if not path.is_file():
        return {}
    out: dict[str, Scored] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn line: that answer is asked again
            if n == 0:
                if not isinstance(row, dict) or row.get("fingerprint") != fingerprint:
                    return None
                continue
            try:
                out[row["key"]] = Scored.from_dict(row)
            except (KeyError, TypeError):
                continue
    return out
