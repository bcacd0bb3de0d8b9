"""Chat with a run's adapter, its base, or both: the engine behind `qlora-app chat` and the UI's Chat tab.

Built from compare's parts, so a greedy reply is compare's answer for the same prompt: the same pair (app/model/pair.py:
the 4-bit base wrapped once with the adapter, the base side the adapter switched off, no second copy), the same prompt
formatting (the run's system prompt and the tokenizer's chat template) and the same generation path
(app/model/generation.py: chat generates one prompt at a time, as compare does at batch size 1; the module says when a
batched compare may differ). Each side keeps its own history: in a side-by-side chat the base answers the
conversation it has had, not the adapter's.
"""

from __future__ import annotations

import threading
from typing import Callable

from app.errors import UserError
from app.ask.asking import Ask, Asker, check_generation, item_tools
from app.model.generation import adds_special_tokens
from app.model.pair import SIDES, conversation_prompt, open_pair
from app.model.placement import context_length
from app.tools.loop import call_lines


class Chat:
    """One loaded model and a history per side. ``reply`` streams through ``on_text`` and honours ``stop``."""

    def __init__(self, run, local_only: bool = False, model: str | None = None,
                 fix: str = "drop --image, or chat with a run trained on images"):
        """``fix``: what the refusal of pictures for a text run tells the user to do (the CLI's words or the UI's)."""
        self.pair = open_pair(run, model, local_only)
        target = self.pair.target
        self.adapter_dir, self.base_name = target.adapter_dir, target.base.name_or_path
        self.run_cfg = target.run_cfg
        self.default_system = target.system_prompt
        self.system = self.default_system
        self.model, self.tok = self.pair.model, self.pair.tok
        self.asker = Asker(self.model, self.tok, self.pair.processor, self.run_cfg, fix=fix)
        self.context = context_length(self.model.config)
        self.history: dict[str, list[dict]] = {s: [] for s in SIDES}
        self._tools: dict[str, list] = {}
        self.last_turns: dict[str, list[dict]] = {}  # a tool run: each side's last reply's calls and results
        self.dropped = 0  # turns left out because the conversation outgrew the context
        self.images: list = []  # a model that reads images: the pictures this conversation is about (set_images)

    def reset(self) -> None:
        self.history = {s: [] for s in SIDES}
        self._tools, self.last_turns = {}, {}

    def set_images(self, images: list) -> None:
        """The pictures (PIL images: app.data.images.open_image) the conversation is about; each side sees them
        before its first message, where training put a row's images. A run whose model reads none: one line."""
        if images:
            self.asker.path(True)  # a model that reads none: the one refusal
        self.images = list(images or [])

    def picture_note(self) -> str | None:
        """What to say when a run trained on pictures is chatted with without one (app.ask.asking.NO_PICTURE)."""
        return self.asker.missing_picture(bool(self.images))

    def tools(self, side: str) -> list:
        """A tool run's guarded tools for ``side`` (an environment: one instance per side and conversation)."""
        if side not in self._tools:
            tools, _ = item_tools(self.run_cfg, [{"messages": [], "reference": None}])
            self._tools[side] = tools[0]
        return self._tools[side]

    def ask(self, side: str, message: str) -> Ask:
        """The side's conversation with ``message`` last, the system prompt first, the conversation's pictures."""
        return Ask.of([*self.history[side], {"role": "user", "content": message}], self.system, self.images)

    def prompt(self, side: str, message: str) -> str:
        return conversation_prompt(self.tok, self.ask(side, message).messages)

    def _fit(self, side: str, message: str, max_new_tokens: int) -> list[int]:
        """The prompt's token ids, dropping the oldest exchanges while they leave no room for the reply; a message
        that alone does not fit is one line."""
        add_special = adds_special_tokens(self.tok)
        while True:
            ids = self.tok(self.prompt(side, message), add_special_tokens=add_special)["input_ids"]
            if self.context is None or len(ids) + max_new_tokens <= self.context:
                return ids
            if not self.history[side]:
                raise UserError(f"the message is {len(ids)} tokens and max new tokens {max_new_tokens}: more than "
                                f"the model's {self.context}-token context; shorten it or lower --max-new-tokens")
            del self.history[side][:2]
            self.dropped += 1

    def reply(self, side: str, message: str, temperature: float = 0.0, max_new_tokens: int = 128, seed: int = 0,
              on_text: Callable[[str], None] | None = None, stop: threading.Event | None = None) -> str:
        """The ``side``'s answer to ``message`` (added to its history). ``on_text`` gets each streamed piece."""
        if side not in SIDES:
            raise UserError(f"side {side!r} is not one of {', '.join(SIDES)}")
        check_generation(temperature, max_new_tokens)
        if not message or not message.strip():
            raise UserError("the message is empty; type something to send")
        path = self.asker.path(bool(self.images))
        # a conversation that outgrew the context loses its oldest turns (pictures are never cut: their path asks
        # the whole conversation)
        ids = None if path == "images" else self._fit(side, message, max_new_tokens)
        ask = self.ask(side, message)  # with the history _fit kept
        with self.pair.side(side):
            answer = self.asker.one(ask, ids, max_new_tokens, temperature, seed, on_text if path == "text" else None,
                                    stop, tools=self.tools(side) if path == "tools" else None)
        if on_text and path != "text":  # answered whole: a tool run's calls and results first
            for line in call_lines(answer.turns or []):
                on_text(line + "\n")
            on_text(answer.text)
        self.history[side] += [{"role": "user", "content": message}, *(answer.turns or [])[:-1],
                               {"role": "assistant", "content": answer.text}]
        if answer.turns is not None:
            self.last_turns[side] = answer.turns
        return answer.text

    def shown(self, side: str, text: str) -> str:
        """A reply as the transcript shows it: a tool run's calls and results of the side's last reply above it."""
        return "".join(line + "\n" for line in call_lines(self.last_turns.get(side) or [])) + text
