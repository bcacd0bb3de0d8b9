"""Asking a teacher outside the training process, over OpenAI's ``/v1/completions`` (the openai client): a GGUF in
its llama.cpp child (gguf_server.py), llama.cpp's server, vLLM, or ``qlora-app serve``.

Two questions: ``score`` (a prompt and an answer sent as token ids, echoed with ``max_tokens`` 0: the teacher's
log-probability of each answer token and its k most likely tokens at each position, the on-policy signal) and
``answer`` (the teacher's greedy answer with the same per-position top-k, the off-policy one). Tokens come back as
ids where the server names them so (vLLM's ``return_tokens_as_token_ids``, which ``serve`` and the child honour),
else through the student's tokenizer (the vocabulary check has made sure the two agree).

Faults: the openai client retries a connection error, a timeout and a 5xx (``retries``, with its backoff); what still
fails is ``TeacherFailed``, one line naming the teacher and the cause (a GGUF child's own death line where it died).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.errors import UserError


class TeacherFailed(UserError):
    """The teacher could not be asked (down, too slow, no log-probabilities, dead): one line; a run stops at its
    last checkpoint (exit 1)."""

    exit_code = 1


@dataclass
class Scored:
    """The teacher on one answer: ``ids`` its tokens, ``lps`` the teacher's log-probability of each (None where it
    was not returned), ``top_ids`` / ``top_lps`` its most likely tokens at each position, most likely first."""

    ids: list[int]
    lps: list[float | None]
    top_ids: list[list[int]] = field(default_factory=list)
    top_lps: list[list[float]] = field(default_factory=list)
    finish: str = ""

    def to_dict(self) -> dict:
        return {"ids": self.ids, "lps": self.lps, "top_ids": self.top_ids, "top_lps": self.top_lps,
                "finish": self.finish}

    @classmethod
    def from_dict(cls, d: dict) -> "Scored":
        return cls(list(d["ids"]), list(d["lps"]), [list(x) for x in d["top_ids"]], [list(x) for x in d["top_lps"]],
                   d.get("finish", ""))


class TeacherClient:
    """An OpenAI-compatible teacher at ``url`` (…/v1), asked for ``model`` (None: the first it lists). ``tok``: the
    student's tokenizer (token names that are not ids are read through it); ``died()``: how a GGUF child ended, None
    while it runs (an endpoint has none)."""

    def __init__(self, url: str, tok, *, api_key: str | None = None, timeout: float = 60.0, retries: int = 3,
                 died=None, batch: int = 8, label: str | None = None, model: str | None = None):
        from openai import OpenAI

        self.url, self.tok, self.died, self.batch = url, tok, died or (lambda: None), batch
        self.label = label or url
        self.timeout = timeout
        self.api = OpenAI(base_url=url, api_key=api_key or "none", timeout=timeout, max_retries=retries)
        self._model: str | None = model  # None: the first the server lists
        self._echo_tokens = 0  # a server that takes no max_tokens 0 with echo gets 1 (the extra token dropped)
        self._pieces: dict[str, int] | None = None
        self.seconds = 0.0  # spent waiting on the teacher
        self.tokens = 0  # tokens it scored or wrote

    # ------------------------------------------------------------------------------------------------ asking
    @property
    def model(self) -> str:
        if self._model is None:
            try:
                listed = self.api.models.list()
                self._model = listed.data[0].id if listed.data else "teacher"
            except Exception as e:  # noqa: BLE001 - each way a server can fail is one line
                raise self._failed(e, "listing its models") from None
        return self._model

    def _create(self, what: str, **kw):
        import openai

        start = time.perf_counter()
        try:
            out = self.api.completions.create(model=self.model, **kw)
        except openai.BadRequestError as e:
            if kw.get("max_tokens") == 0 and "max_tokens" in str(e) and self._echo_tokens == 0:
                self._echo_tokens = 1  # vLLM and others want one token to echo a prompt
                return self._create(what, **{**kw, "max_tokens": 1})
            raise self._failed(e, what) from None
        except Exception as e:  # noqa: BLE001 - each way a server can fail is one line
            raise self._failed(e, what) from None
        self.seconds += time.perf_counter() - start
        return out

    def _failed(self, e: Exception, what: str) -> TeacherFailed:
        import openai

        died = self.died()
        if died:
            return TeacherFailed(f"the teacher {self.label}: {died}")
        if isinstance(e, openai.APITimeoutError):
            why = (f"it did not answer within {self.timeout:g} s (distill.teacher_timeout), after retries; a slower "
                   "teacher needs a longer timeout")
        elif isinstance(e, openai.APIConnectionError):
            why = "it is not answering (connection refused or lost), after retries; start it, or check --teacher"
        elif isinstance(e, openai.APIStatusError):
            body = getattr(e, "body", None)
            message = body.get("message") if isinstance(body, dict) else None
            why = f"it answered HTTP {e.status_code} ({(message or str(e)).splitlines()[0][:200]})"
        else:
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return TeacherFailed(f"the teacher {self.label} failed {what}: {why}")

    def _ids(self, names: list[str]) -> list[int | None]:
        """Token names as ids: ``token_id:N``, else the tokenizer's own piece, else the text one id decodes to."""
        out = []
        for name in names:
            if name.startswith("token_id:"):
                out.append(int(name[len("token_id:"):]))
                continue
            found = self.tok.convert_tokens_to_ids(name)
            if isinstance(found, int) and found != self.tok.unk_token_id:
                out.append(found)
                continue
            if self._pieces is None:
                self._pieces = {}
                for i in range(len(self.tok)):
                    self._pieces.setdefault(self.tok.decode([i]), i)
            out.append(self._pieces.get(name))
        return out

    def _read(self, logprobs, start: int, k: int, what: str) -> Scored:
        """Positions ``start``.. of a choice's logprobs as a Scored (its top-k at most ``k`` + the token itself)."""
        if logprobs is None or not getattr(logprobs, "tokens", None):
            raise TeacherFailed(f"the teacher {self.label} returned no log-probabilities {what}: distillation needs "
                                "a server that returns them (llama.cpp's server, vLLM, qlora-app serve)")
        ids = self._ids(list(logprobs.tokens))
        top = logprobs.top_logprobs or [None] * len(ids)
        lps = logprobs.token_logprobs or [None] * len(ids)
        out = Scored([], [], [], [])
        for j in range(start, len(ids)):
            alts = sorted(((self._ids([n])[0], v) for n, v in (top[j] or {}).items()), key=lambda a: -a[1])
            alts = [(t, float(v)) for t, v in alts if t is not None][: k + 1]
            if ids[j] is None:
                raise TeacherFailed(f"the teacher {self.label} named a token the student's tokenizer does not have "
                                    f"({logprobs.tokens[j]!r}): another vocabulary")
            out.ids.append(ids[j])
            out.lps.append(None if lps[j] is None else float(lps[j]))
            out.top_ids.append([t for t, _ in alts])
            out.top_lps.append([v for _, v in alts])
        return out

    def score(self, sequences: list[list[int]], prompt_lengths: list[int], k: int) -> list[Scored]:
        """The teacher on each sequence's answer (its tokens from ``prompt_lengths``): one request per ``batch``."""
        out = []
        for at in range(0, len(sequences), self.batch):
            seqs, starts = sequences[at:at + self.batch], prompt_lengths[at:at + self.batch]
            r = self._create("scoring answers", prompt=seqs, echo=True, max_tokens=self._echo_tokens, logprobs=k,
                             temperature=0.0, extra_body={"return_tokens_as_token_ids": True})
            for choice, seq, start in zip(sorted(r.choices, key=lambda c: c.index), seqs, starts):
                scored = self._read(choice.logprobs, start, k, "for an answer")
                if len(scored.ids) > len(seq) - start:  # the one token a server wanted to write
                    scored = Scored(*(x[:len(seq) - start] for x in (scored.ids, scored.lps, scored.top_ids,
                                                                     scored.top_lps)))
                if scored.ids != list(seq[start:]):
                    raise TeacherFailed(f"the teacher {self.label} scored other tokens than it was sent: it reads "
                                        "token ids another way (another vocabulary)")
                out.append(scored)
                self.tokens += len(seq)
        return out

    def answer(self, prompts: list[list[int]], max_tokens: int, k: int, eos: int | None,
               scored: bool = True) -> list[Scored]:
        """The teacher's greedy answer to each prompt (token ids), with the teacher's top-k at each of its tokens; an
        answer that ended on its own is closed with ``eos`` and scored whole (what the student learns to stop on).
        ``scored`` False: the answers' tokens alone (a proof reads the text)."""
        written = []
        for at in range(0, len(prompts), self.batch):
            batch = prompts[at:at + self.batch]
            r = self._create("answering prompts", prompt=batch, max_tokens=max_tokens, logprobs=1, temperature=0.0,
                             extra_body={"return_tokens_as_token_ids": True})
            for choice in sorted(r.choices, key=lambda c: c.index):
                ids = self._read(choice.logprobs, 0, 1, "for its answer").ids if choice.logprobs else []
                if ids and eos is not None and ids[-1] == eos:
                    ids = ids[:-1]
                stopped = choice.finish_reason == "stop"
                written.append((ids + ([eos] if stopped and eos is not None else []), choice.finish_reason))
        if not scored:
            return [Scored(ids, [None] * len(ids), finish=finish) for ids, finish in written]
        out = self.score([p + ids for p, (ids, _) in zip(prompts, written)], [len(p) for p in prompts], k)
        for s, (_, finish) in zip(out, written):
            s.finish = finish
        return out

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """How the teacher tokenizes each text (echoed, nothing written): the vocabulary check's evidence."""
        r = self._create("tokenizing a sample of the data", prompt=texts, echo=True, max_tokens=self._echo_tokens,
                         logprobs=0, temperature=0.0, extra_body={"return_tokens_as_token_ids": True})
        out = []
        for choice, text in zip(sorted(r.choices, key=lambda c: c.index), texts):
            if choice.logprobs is None or not choice.logprobs.tokens:
                raise TeacherFailed(f"the teacher {self.label} returned no log-probabilities (asked with echo and "
                                    "logprobs): distillation needs a server that returns them (llama.cpp's server, "
                                    "vLLM, qlora-app serve)")
            ids = self._ids(list(choice.logprobs.tokens))
            out.append(ids[: len(ids) - self._echo_tokens] if self._echo_tokens else ids)
        return out

    @property
    def tokens_per_second(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None
