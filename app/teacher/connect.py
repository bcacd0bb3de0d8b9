"""Opening a teacher outside the training process as the plan recorded it (``where``: TeacherPlan.outside's record,
status.json's teacher.where): a GGUF's llama.cpp child started with the plan's threads, context and offloaded layers
(its notes in the run folder's teacher.log), or an endpoint's address; either way a TeacherClient. The one place
both are opened: the plan's probe, training and the proof all come through here.

An endpoint's key, where it needs one: QLORA_APP_TEACHER_API_KEY, else OPENAI_API_KEY (read, never set).
"""

from __future__ import annotations

import os
from pathlib import Path

from app.teacher.client import TeacherClient
from app.teacher.gguf_server import GgufSettings, GgufTeacher


class OutsideTeacher:
    """``where``'s teacher, opened by ``open`` (a GGUF's child started) and ended by ``close``; ``client`` asks it."""

    def __init__(self, where: dict, tok, log_file: Path | None = None):
        self.where, self.tok, self.log_file = where, tok, log_file
        self.child: GgufTeacher | None = None
        self.client: TeacherClient | None = None

    def open(self) -> "OutsideTeacher":
        w = self.where
        timeout = float(w.get("timeout") or 120.0)
        if w["kind"] == "gguf":
            self.child = GgufTeacher(Path(w["given"]), GgufSettings(int(w["threads"]), int(w["context"]),
                                                                    int(w.get("gpu_layers") or 0)),
                                     self.log_file).start()
            self.client = TeacherClient(self.child.url, self.tok, timeout=timeout, died=self.child.died,
                                        label=Path(w["given"]).name)
        else:
            key = os.environ.get("QLORA_APP_TEACHER_API_KEY") or os.environ.get("OPENAI_API_KEY")
            self.client = TeacherClient(w["given"].rstrip("/"), self.tok, api_key=key, timeout=timeout,
                                        model=w.get("model"))
        return self

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None

    def __enter__(self) -> "OutsideTeacher":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
