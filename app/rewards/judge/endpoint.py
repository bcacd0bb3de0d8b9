"""A judge behind an OpenAI-compatible endpoint (llama.cpp's server, Ollama, vLLM, a hosted API), asked through the
official ``openai`` client.

Each judgement is one chat completion at temperature 0. The reply is asked for as structured output where the server
takes it, so even a small judge can only answer ``{"score": N}``: first OpenAI's ``json_schema`` form (vLLM, llama.cpp's
server, Ollama), then ``json_object`` with a schema (llama-cpp-python's server), then plain text; the first form the
server accepts is kept for the run. A timeout, a refused connection or a server error is tried again
(``judge.retries``); an unreadable reply is not (at temperature 0 it would come back the same), nor a request the
server refuses for what it is (a 4xx other than 408 and 429: an unknown model, a prompt longer than the judge's
context, a bad key come back the same). What still fails scores None and is counted.

A server refuses a reply form with 400 or 422 (OpenAI, vLLM, Ollama) or, as llama-cpp-python's does, with a 500
whose message names ``response_format``; either names the form (``FORM_WORDS``). Any other refusal (a prompt longer
than the judge's context) refuses the request whatever its form, and keeps the structured forms for the run.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

from app.host import net
from app.rewards.judge.rubric import SCORE_SCHEMA, parse_score

# The reply forms tried in order (a server that rejects one with 400/422 gets the next).
REPLY_FORMATS = (
    {"response_format": {"type": "json_schema", "json_schema": {"name": "score", "schema": SCORE_SCHEMA}}},
    {"response_format": {"type": "json_object", "schema": SCORE_SCHEMA}},
    {},
)


FORM_WORDS = ("response_format", "json_schema", "json_object", "schema", "grammar", "format", "guided")
RETRIED_4XX = (408, 409, 429)  # a client error that may pass on a second try: timeout, conflict, rate limit


def _refused_for_good(status: int) -> bool:
    """A client error that a second try would get again (an unknown model, a prompt too long, a bad key)."""
    return 400 <= status < 500 and status not in RETRIED_4XX


def is_this_machine(url: str) -> bool:
    """Whether ``url``'s host is this machine (app.host.net: loopback or its own host name, without DNS).

    >>> is_this_machine("http://127.0.0.1:8080/v1"), is_this_machine("http://[::1]:11434"), is_this_machine(
    ...     "https://api.openai.com/v1")
    (True, True, False)
    """
    return net.is_this_machine(urlparse(url).hostname or "")


class EndpointJudge:
    """Scores rendered rubric texts through ``judge.url``; ``judge_many(texts)`` -> [(score | None, failure | None)],
    failure one of "timeout", "error", "unreadable"."""

    def __init__(self, judge_cfg):
        self.cfg = judge_cfg
        self._client = None
        self._model = judge_cfg.model
        self._formats = list(REPLY_FORMATS)
        self._lock = threading.Lock()
        self.last_failure = ""  # the latest failure's words, for the log

    def __getstate__(self):  # the HTTP client does not pickle; it is made again on first use
        return {"cfg": self.cfg, "_client": None, "_model": self._model, "_formats": list(REPLY_FORMATS),
                "last_failure": ""}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def client(self):
        with self._lock:
            if self._client is None:
                from openai import OpenAI

                key = os.environ.get(self.cfg.api_key_env or "", "") or "no-key"  # local servers take any key
                self._client = OpenAI(base_url=self.cfg.url, api_key=key, timeout=self.cfg.timeout_s, max_retries=0)
            return self._client

    def model(self) -> str:
        """The model name asked for: judge.model, else the first model the endpoint lists."""
        if self._model is None:
            listed = list(self.client().models.list())
            if not listed:
                raise RuntimeError(f"{self.cfg.url} lists no model; set reward.judge.model")
            self._model = listed[0].id
        return self._model

    def _ask(self, text: str) -> str:
        import openai

        while True:
            fmt = self._formats[0]
            try:
                reply = self.client().chat.completions.create(
                    model=self.model(), messages=[{"role": "user", "content": text}], temperature=0,
                    max_tokens=self.cfg.max_tokens, **fmt)
                return reply.choices[0].message.content or ""
            except openai.APIStatusError as e:
                # 400 / 422 naming the form is how servers refuse a reply form (llama-cpp-python answers 500 naming
                # the field); a 400 about anything else (the context, the model) refuses the request, in any form
                said = str(e).lower()
                refused = any(w in said for w in FORM_WORDS) and (e.status_code in (400, 422) or "response_format"
                                                                  in said)
                if not fmt or not refused:  # a plain request refused, or a server error: retried as a failure
                    raise
                with self._lock:  # this server does not take this reply form: the next one, for the rest of the run
                    if self._formats and self._formats[0] is fmt and len(self._formats) > 1:
                        self._formats.pop(0)

    def judge_one(self, text: str) -> tuple[float | None, str | None]:
        import openai

        for attempt in range(self.cfg.retries + 1):
            try:
                reply = self._ask(text)
            except openai.APITimeoutError:
                failure, self.last_failure = "timeout", f"no reply within {self.cfg.timeout_s:g} s"
            except (openai.APIError, RuntimeError, OSError) as e:  # refused, 5xx, lost connection, no model listed
                failure, self.last_failure = "error", f"{type(e).__name__}: {str(e)[:160]}"
                if isinstance(e, openai.APIStatusError) and _refused_for_good(e.status_code):
                    return None, failure  # refused for what it asks: the same request is refused again
            else:
                score = parse_score(reply)
                if score is None:
                    self.last_failure = f"no 0-10 score in the reply {reply[:120]!r}"
                    return None, "unreadable"
                return score, None
            if attempt < self.cfg.retries:
                time.sleep(min(2.0, 0.25 * 2 ** attempt))
        return None, failure

    def judge_many(self, texts: list[str]) -> list[tuple[float | None, str | None]]:
        if len(texts) <= 1:
            return [self.judge_one(t) for t in texts]
        with ThreadPoolExecutor(max_workers=min(self.cfg.batch_size, len(texts))) as pool:
            return list(pool.map(self.judge_one, texts))
