"""The Chat tab's logic (no Gradio here): one loaded model for the UI process, base and adapter answering the same
message, streamed. Built on app.eval.chat, the engine `qlora-app chat` uses."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from app.config.build import load_yaml_file, validate
from app.data.images import open_image
from app.errors import UserError
from app.eval.chat import Chat
from app.host.threads import use_free_cores
from app.run import layout, lookup
from app.ui.compare_view import compare_choices, wait_for_gpu
from app.ui.folders import run_path

EMPTY_REPLY = "_(no text: the model ended its reply at once)_"
WHO = {"adapter and base": ("adapter", "base"), "adapter": ("adapter",), "base": ("base",)}


def chat_choices(runs_dir: str | Path) -> list[str]:
    return compare_choices(runs_dir)


def run_system_prompt(runs_dir: str | Path, name: str | None) -> str:
    if not name:
        return ""
    try:
        cfg = validate(load_yaml_file(lookup.require_run_dir(run_path(runs_dir, name)) / layout.CONFIG))
    except UserError:
        return ""
    return cfg.data.system_prompt or ""


class ChatHolder:
    """The one Chat the page talks to; another run loads another (the previous one is released first)."""

    def __init__(self):
        self.session: Chat | None = None
        self.name: str | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()  # one reply at a time: both sides share the model

    def get(self, jobs, runs_dir, name: str, local_only: bool) -> Chat:
        if not name:
            raise UserError("select a run with an adapter (finished or stopped runs have one)")
        wait_for_gpu(jobs, "chat")
        if self.session is None or self.name != name:
            self.session = None  # free the previous model before loading the next
            use_free_cores()  # a UI action is a command of this process: the cores a training job leaves free
            self.session = Chat(lookup.require_run_dir(run_path(runs_dir, name)), local_only=bool(local_only),
                                fix="remove the picture, or pick a run trained on pictures")
            self.name = name
        return self.session

    def reset(self) -> None:
        if self.session is not None:
            self.session.reset()


def stream(holder: ChatHolder, jobs, runs_dir, name, system, message, who, temperature, max_new_tokens,
           local_only, image: str | None = None):
    """Yields {side: text so far} while each side answers in turn (adapter first). ``image``: an uploaded picture
    (a file path) the conversation is about, for a run trained on images."""
    try:  # a broken file: one line before the model loads, naming the picture as the user named it
        picture = [open_image(image)] if image else []
    except UserError as e:
        raise UserError(str(e).replace(str(image), Path(image).name)) from None
    with holder.lock:
        session = holder.get(jobs, runs_dir, name, local_only)
        session.set_images(picture)
        system = (system or "").strip() or None
        if system != session.system:  # a new system prompt starts a new conversation
            session.system = system
            session.reset()
        holder.stop.clear()
        note = session.picture_note()  # a run trained on pictures, asked without one: said above each answer
        head = f"({note}: upload a picture to ask about it)\n" if note else ""
        shown = {s: head for s in WHO[who]}
        for side in WHO[who]:
            pieces: queue.Queue = queue.Queue()
            out: dict = {}

            def run(side=side):
                try:
                    out["text"] = session.reply(side, message, temperature=float(temperature),
                                                max_new_tokens=int(max_new_tokens), on_text=pieces.put,
                                                stop=holder.stop)
                except BaseException as e:  # noqa: BLE001 - shown on the page by the caller
                    out["error"] = e
                finally:
                    pieces.put(None)

            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            try:
                while (piece := pieces.get()) is not None:
                    shown[side] += piece
                    yield dict(shown)
            except GeneratorExit:  # the page went away mid-answer: stop generating, free the model for the next
                holder.stop.set()
                worker.join()
                raise
            if "error" in out:
                raise out["error"]
            shown[side] = head + session.shown(side, out["text"])  # a tool run keeps its calls above the answer
            yield dict(shown)
            if holder.stop.is_set():
                return
