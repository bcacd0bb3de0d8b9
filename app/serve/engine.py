"""The model a server answers with: a run's adapter and its base, one copy in memory.

Built from chat's parts: the run's pair (app/model/pair.py: the base in 4-bit wrapped once with the adapter, the base
side the adapter switched off), the run's system prompt added when a request has none, the tokenizer's chat template,
and ``generate_one`` (compare at batch size 1), so a greedy reply equals `compare`'s and `chat`'s.
Requests are served one at a time, in arrival order (a lock; a waiting request holds no model memory); a request
whose client went away stops at its next token.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from app.errors import UserError
from app.ask.asking import Ask, Asker
from app.model.generation import adds_special_tokens
from app.model.pair import conversation_prompt, open_pair
from app.model.placement import context_length
from app.model.templates import ensure_tool_parser, tool_template_problem
from app.run.lookup import adapter_name
from app.tools.loop import read_turn

log = logging.getLogger("qlora_app")

BASE_SUFFIX = "-base"  # the base's model name: the run's name with this suffix


def served_names(adapter_dir) -> dict[str, str]:
    """{model name: side}: the run's name is its adapter, the name + BASE_SUFFIX its base (every engine's names)."""
    name = adapter_name(adapter_dir)
    return {name: "adapter", name + BASE_SUFFIX: "base"}


class Reply(NamedTuple):
    text: str  # cut before the first stop string met
    prompt_tokens: int
    reply_tokens: int
    stopped_at: str | None = None  # the stop string that ended it
    ids: list[int] | None = None  # the token ids generated (None: a reply cut by a stop string, or not generated)


class StopAt:
    """Ends a reply before the first of its stop strings. ``feed(piece)`` returns what may be shown now: a tail that
    could still be the start of a stop string is held back until the next piece says (``rest()`` at the end)."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.text, self.sent, self.hit = "", 0, None
        self.hold = max((len(s) - 1 for s in self.stops), default=0)

    def first(self, text: str) -> tuple[int, str] | None:
        """(where, which) of the first stop string in ``text``, or None."""
        return min(((i, s) for s in self.stops if (i := text.find(s)) != -1), default=None)

    def feed(self, piece: str) -> str:
        if self.hit is not None:
            return ""
        self.text += piece
        found = self.first(self.text)
        if found:
            cut, self.hit = found
            self.text = self.text[:cut]
        safe = len(self.text) if self.hit is not None else max(self.sent, len(self.text) - self.hold)
        out, self.sent = self.text[self.sent:safe], safe
        return out

    def rest(self) -> str:
        out, self.sent = self.text[self.sent:], len(self.text)
        return out


@dataclass
class Stats:
    """What the server did, for its log and its tests."""

    requests: int = 0
    stopped: int = 0  # replies ended early because the client went away
    waited_s: float = 0.0  # time requests spent waiting for the model
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Engine:
    """``names``: {model name: side}; ``reply(name, messages, ...)`` one answer at a time."""

    def __init__(self, run, local_only: bool = False, model: str | None = None, fetch_internal: bool = False):
        self.pair = open_pair(run, model, local_only)
        self.local_only = local_only  # a request's remote image URL is a 400 then, never a fetch
        self.fetch_internal = fetch_internal  # a request's image URL may reach loopback / private addresses
        self.run_cfg = self.pair.target.run_cfg
        self.system = self.pair.target.system_prompt
        self.names = served_names(self.pair.target.adapter_dir)
        self.model, self.tok = self.pair.model, self.pair.tok
        # the client runs its own tools (OpenAI's protocol): the run's are never run here
        self.asker = Asker(self.model, self.tok, self.pair.processor, self.run_cfg, run_tools=False,
                           fix="send text content only")
        self.context = context_length(self.model.config)
        self.created = int(time.time())
        self.stats = Stats()
        self._turn = threading.Lock()

    def side(self, name: str) -> str:
        if name not in self.names:
            raise UserError(f"model '{name}' is not served here; use one of {', '.join(self.names)}")
        return self.names[name]

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt text for an OpenAI-style conversation: the run's system prompt first when it has none; the
        request's tools rendered by the chat template (a template that cannot is one line)."""
        if tools:
            problem = tool_template_problem(self.tok, self.pair.target.base.name_or_path)
            if problem:
                raise UserError(problem)
        return conversation_prompt(self.tok, messages, self.system, tools)

    def tool_calls(self, reply: str, prompt: str, tools: list[dict]) -> tuple[str, list[dict] | None]:
        """(content, OpenAI tool_calls or None) of a reply to a tools request, read by TRL's parser as training reads
        a rollout's calls (app/tools/loop.py)."""
        ensure_tool_parser(self.tok)
        ids = self.tok(reply, add_special_tokens=False)["input_ids"]
        content, parsed = read_turn(self.tok, ids, self.tok(prompt, add_special_tokens=False)["input_ids"], tools)
        calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                  "function": {"name": (c.get("function") or {}).get("name"),
                               "arguments": json.dumps((c.get("function") or {}).get("arguments") or {})}}
                 for c in parsed or []]
        return content.strip() if calls else reply, calls or None

    def ids(self, text: str, max_tokens: int) -> list[int]:
        """The prompt's token ids; a prompt that leaves no room for ``max_tokens`` is one line."""
        return self.fits(self.tok(text, add_special_tokens=adds_special_tokens(self.tok))["input_ids"], max_tokens)

    def fits(self, ids: list[int], max_tokens: int) -> list[int]:
        """``ids``, when they leave room for ``max_tokens`` in the model's context; else one line."""
        if self.context is not None and len(ids) + max_tokens > self.context:
            raise UserError(f"the prompt is {len(ids)} tokens and max_tokens {max_tokens}: more than the model's "
                            f"{self.context}-token context; shorten it or lower max_tokens")
        return list(ids)

    def reply_tokens(self, ids: list[int], asked: int | None, most: int) -> int:
        """A request's reply length for prompt ``ids``, checked against the context: ``asked``, or when it names
        none ``most`` or what the context leaves beside the prompt."""
        if asked is None and self.context is not None:
            self.fits(ids, 1)
            return max(1, min(most, self.context - len(ids)))
        tokens = most if asked is None else asked
        self.fits(ids, tokens)
        return tokens

    def checked_ids(self, ids: list[int], max_tokens: int) -> list[int]:
        """A prompt sent as token ids: every id in the vocabulary, and room left for ``max_tokens``."""
        vocab = len(self.tok)
        if any(t >= vocab for t in ids):
            raise UserError(f"the prompt holds token ids beyond this model's vocabulary of {vocab}")
        return self.fits(ids, max_tokens)

    def logprobs(self, name: str, prompt_ids: list[int], reply: Reply, top: int, echo: bool = False) -> list[tuple]:
        """[(token id, log-probability or None, [(alternative id, log-probability)])] of the reply's tokens (those
        generated; a reply cut by a stop string: its text as the tokenizer splits it) and, with ``echo``, the
        prompt's first (its first token has no context: None), as model ``name`` reads them when it is free: the
        model's own values (app/ask/logprobs.token_logprobs)."""
        side = self.side(name)
        said = reply.ids if reply.ids is not None else self.tok(reply.text, add_special_tokens=False)["input_ids"]
        ids = list(prompt_ids) + list(said)
        with self._turn, self.pair.side(side):
            scored = self.asker.token_logprobs(ids, 1 if echo else len(prompt_ids), top)
        return ([(ids[0], None, [])] if echo and ids else []) + scored

    def reply(self, name: str, text: str, max_tokens: int, temperature: float, seed: int = 0, on_text=None,
              stop: threading.Event | None = None, stops: list[str] = (), images: list = (),
              messages: list[dict] | None = None, prompt_ids: list[int] | None = None) -> Reply:
        """The reply to prompt ``text`` (or its token ids as the caller read them, ``prompt_ids``) from model
        ``name``, when the model is free; ``stops``: strings that end it (not shown, not counted), streamed or not; ``images`` with
        ``messages``: a chat request with pictures, answered whole (one piece when streamed)."""
        side = self.side(name)
        ids = self.fits(prompt_ids, max_tokens) if prompt_ids is not None else self.ids(text, max_tokens)
        watch = StopAt(list(stops))
        ended = _Either(stop)

        def piece(p: str) -> None:
            out = watch.feed(p)
            if out and on_text:
                on_text(out)
            if watch.hit is not None:
                ended.own.set()  # the stop string is met: generation ends at the next token

        t0 = time.monotonic()
        with self._turn:
            waited = time.monotonic() - t0
            # pictures: the conversation asked whole with them (one piece when streamed); text: the prompt's ids
            ask = Ask.of(messages or [], self.system, images)
            note = self.asker.missing_picture(bool(images))
            if note:  # the client gets the answer it asked for; whoever runs the server reads why it may be off
                log.warning("%s: %s", name, note)
            streamed = on_text or watch.stops
            with self.pair.side(side):
                answer = self.asker.one(ask, ids, max_tokens, temperature, seed, piece if streamed else None, ended)
            out = answer.text
            if images and streamed:
                piece(out)
        hit = watch.first(out)  # the whole text is cut as the stream was (the decoded text is the reference)
        if hit:
            out = out[:hit[0]]
        if on_text and watch.hit is None and (rest := watch.rest()):
            on_text(rest)  # what was held back in case it began a stop string
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.waited_s += waited
            self.stats.stopped += int(bool(stop and stop.is_set()))
        made = None if hit else answer.ids  # the tokens generated, where the reply is all of them
        return Reply(out, len(ids), len(made) if made is not None else
                     len(self.tok(out, add_special_tokens=False)["input_ids"]), hit[1] if hit else None, made)


class _Either:
    """Set when the client's event (gone away) or this reply's own (a stop string met) is."""

    def __init__(self, other: threading.Event | None):
        self.other, self.own = other, threading.Event()

    def is_set(self) -> bool:
        return self.own.is_set() or bool(self.other and self.other.is_set())
