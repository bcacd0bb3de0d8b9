"""The model a server answers with: a run's adapter and its base, one copy in memory.

Built from chat's parts: the run's pair (app/model/pair.py: the base in 4-bit wrapped once with the adapter, the base
side the adapter switched off), the run's system prompt added when a request has none, the tokenizer's chat template,
and ``generate_one`` (compare at batch size 1), so a greedy reply equals `compare`'s and `chat`'s.
Requests are served one at a time, in arrival order (a lock; a waiting request holds no model memory); a request
whose client went away stops at its next token.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from app.errors import UserError
from app.model.generation import adds_special_tokens, generate_one
from app.model.pair import conversation_prompt, open_pair
from app.model.placement import context_length
from app.run.lookup import adapter_name

BASE_SUFFIX = "-base"  # the base's model name: the run's name with this suffix


def served_names(adapter_dir) -> dict[str, str]:
    """{model name: side}: the run's name is its adapter, the name + BASE_SUFFIX its base (every engine's names)."""
    name = adapter_name(adapter_dir)
    return {name: "adapter", name + BASE_SUFFIX: "base"}


@dataclass
class Stats:
    """What the server did, for its log and its tests."""

    requests: int = 0
    stopped: int = 0  # replies ended early because the client went away
    waited_s: float = 0.0  # time requests spent waiting for the model
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Engine:
    """``names``: {model name: side}; ``reply(name, messages, ...)`` one answer at a time."""

    def __init__(self, run, local_only: bool = False, model: str | None = None):
        self.pair = open_pair(run, model, local_only)
        self.run_cfg = self.pair.target.run_cfg
        self.system = self.pair.target.system_prompt
        self.names = served_names(self.pair.target.adapter_dir)
        self.model, self.tok = self.pair.model, self.pair.tok
        self.context = context_length(self.model.config)
        self.created = int(time.time())
        self.stats = Stats()
        self._turn = threading.Lock()

    def side(self, name: str) -> str:
        if name not in self.names:
            raise UserError(f"model '{name}' is not served here; use one of {', '.join(self.names)}")
        return self.names[name]

    def chat_prompt(self, messages: list[dict]) -> str:
        """The prompt text for an OpenAI-style conversation: the run's system prompt first when it has none."""
        return conversation_prompt(self.tok, [{"role": m["role"], "content": m["content"]} for m in messages],
                                   self.system)

    def _fit(self, text: str, max_tokens: int) -> list[int]:
        ids = self.tok(text, add_special_tokens=adds_special_tokens(self.tok))["input_ids"]
        if self.context is not None and len(ids) + max_tokens > self.context:
            raise UserError(f"the prompt is {len(ids)} tokens and max_tokens {max_tokens}: more than the model's "
                            f"{self.context}-token context; shorten it or lower max_tokens")
        return ids

    def ids(self, text: str, max_tokens: int) -> list[int]:
        """The prompt's token ids; a prompt that leaves no room for ``max_tokens`` is one line."""
        return self._fit(text, max_tokens)

    def reply_tokens(self, text: str, asked: int | None, most: int) -> int:
        """A request's reply length, checked against the context: ``asked``, or when it names none ``most`` or what
        the context leaves beside the prompt (the prompt tokenized once)."""
        if asked is not None or self.context is None:
            tokens = most if asked is None else asked
            self._fit(text, tokens)
            return tokens
        used = len(self._fit(text, 1))
        return max(1, min(most, self.context - used))

    def reply(self, name: str, text: str, max_tokens: int, temperature: float, seed: int = 0, on_text=None,
              stop: threading.Event | None = None) -> tuple[str, int, int]:
        """(reply, prompt tokens, reply tokens) for prompt ``text`` from model ``name``, when the model is free."""
        side = self.side(name)
        ids = self.ids(text, max_tokens)
        t0 = time.monotonic()
        with self._turn:
            waited = time.monotonic() - t0
            with self.pair.side(side):
                out = generate_one(self.model, self.tok, ids, max_tokens, temperature, seed, on_text, stop)
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.waited_s += waited
            self.stats.stopped += int(bool(stop and stop.is_set()))
        return out, len(ids), len(self.tok(out, add_special_tokens=False)["input_ids"])
