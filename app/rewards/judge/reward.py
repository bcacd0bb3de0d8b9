"""The ``judge`` component: each completion scored 0..1 by a model reading the rubric (app/rewards/judge/rubric.py),
with the row's prompt and reference.

A TRL reward function like the others (``fn(completions, prompts=..., reference=...) -> list[float | None]``), with
three things of its own: judgements are cached per (prompt, completion, reference), so a completion sampled twice,
or scored again by compare, costs one call; a batch is judged at once (requests in flight, or rows of a forward
pass); and a failed judgement (timeout, refused, unreadable reply) scores None, is logged (the first few, then every
thousandth, as reward failures are) and counted in ``stats`` (calls, failures, timeouts, seconds: metrics.jsonl's
``judge/...`` keys and status.json's ``judge_counts``). A run goes on whatever the judge does.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict

from app.errors import UserError
from app.model.source import check_model_source
from app.rewards import answer as A
from app.rewards.components import Component
from app.rewards.judge.endpoint import EndpointJudge, is_this_machine
from app.rewards.judge.local import LocalJudge
from app.rewards.judge.rubric import load_rubric, render
from app.run.counts import CallCounts, error_text

CACHE_SIZE = 50_000  # judgements kept: a run re-scores few, compare re-scores its rows
STATS_NAME = "judge"  # the counters' name in stats (metrics.jsonl: judge/calls, judge/failures, ...)


def prompt_text(prompt) -> str:
    """The task as the judge reads it: the last user turn of a chat prompt (the system prompt and earlier turns are
    the model's instructions, not the question), or the prompt itself."""
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return A.to_text(users[-1] if users else prompt)
    return A.to_text(prompt)


def check_judge(judge_cfg, local_only: bool, loads: bool = True) -> str:
    """Check a run's judge before anything loads (one UserError line each): the rubric file, an endpoint that is not
    this machine under --local-only, a local judge model that cannot be loaded from here (``loads``: the run will
    load it; a dry run plans it for any machine). Returns the line the plan says about it."""
    load_rubric(judge_cfg.rubric)
    rubric = f"rubric {judge_cfg.rubric}" if judge_cfg.rubric else "qlora-app's rubric"
    if judge_cfg.url:
        if local_only and not is_this_machine(judge_cfg.url):
            raise UserError(f"reward.judge.url {judge_cfg.url} is not this machine and --local-only never leaves it; "
                            "serve the judge here (llama.cpp's server, Ollama, vLLM on 127.0.0.1) or drop --local-only")
        return (f"judge: {judge_cfg.model or 'the first model'} at {judge_cfg.url}, {rubric}; {judge_cfg.batch_size} "
                f"requests in flight, {judge_cfg.timeout_s:g} s each, {judge_cfg.retries} retries")
    if loads:
        check_model_source(judge_cfg.model, local_only)
    return (f"judge: local model {judge_cfg.model} in 4-bit beside the trained one (counted in the memory estimate), "
            f"{rubric}; score = the probability-weighted 0-10 of its next token, {judge_cfg.batch_size} at a time")


def probe_judge(judge_cfg, prompt: str, completion: str, reference: str | None) -> str:
    """One real judgement of a training row by an endpoint judge, before any model loads: a judge that is down,
    refuses the request (an unknown model, a context shorter than the rubric and the row) or answers without a score
    is one UserError line with the fix, instead of a run that trains with every judgement failed. Tried once (its
    timeout), not retried. Returns the line the plan says about it."""
    judge = EndpointJudge(judge_cfg.model_copy(update={"retries": 0}))
    t0 = time.monotonic()
    try:
        value, failure = judge.judge_one(render(load_rubric(judge_cfg.rubric), prompt, A.strip_think(completion),
                                                reference))
    except Exception as e:  # noqa: BLE001 - whatever breaks, the user gets the line below
        value, failure, judge.last_failure = None, "error", error_text(e)
    if failure is None:
        return (f"judge: answered a training row's judgement in {time.monotonic() - t0:.1f} s "
                f"({value * 10:g}/10, model {judge.model()})")
    why = " ".join(judge.last_failure.split())
    if failure == "timeout":
        fix = f"start the judge, or raise reward.judge.timeout_s (now {judge_cfg.timeout_s:g})"
    elif failure == "unreadable":
        fix = "use a judge model that follows the rubric, or a reward.judge.rubric that asks for one 0-10 number"
    elif "NotFound" in why or "404" in why:
        fix = "set reward.judge.model to a model the server lists (GET /v1/models)"
    elif "Connection" in why:
        fix = f"start the judge server, or fix reward.judge.url (now {judge_cfg.url})"
    elif "context" in why or "token" in why:
        fix = ("serve the judge with a longer context, shorten reward.judge.rubric, or lower reward.judge.max_tokens "
               f"(now {judge_cfg.max_tokens})")
    elif "Authentication" in why or "401" in why or "403" in why:
        fix = f"set the key in the variable reward.judge.api_key_env names (now {judge_cfg.api_key_env})"
    else:
        fix = "fix reward.judge (url, model), or set reward.weights.judge=0 to train without it"
    raise UserError(f"the judge at {judge_cfg.url} failed a first judgement of a training row before training "
                    f"({failure}: {why}); {fix}")


class JudgeReward(Component):
    """The judge component; the judge is the endpoint at judge.url, else the local model judge.model."""

    name = "judge"
    reads_prompt = True

    @classmethod
    def from_config(cls, reward_cfg) -> "JudgeReward":
        return cls(reward_cfg.judge)

    def __init__(self, judge_cfg, local_only: bool = False, device: str = "auto"):
        super().__init__()
        self.cfg = judge_cfg
        self.rubric = load_rubric(judge_cfg.rubric)
        self.stats = CallCounts()  # its own; a run's judge counts in the run's (count_in)
        self._cache: OrderedDict[str, float] = OrderedDict()
        self.place(local_only, device)

    def count_in(self, counts) -> None:
        """A judge made for a run: its judgements count in the run's counts (app/run/counts.RunCounts)."""
        super().count_in(counts)
        self.stats = counts.judge

    def place(self, local_only: bool, device: str) -> None:
        """Where a local judge loads from and runs (the run's runtime.local_only and device); an endpoint stays."""
        if getattr(self, "_placed", None) == (local_only, device):  # already there (its model loaded, maybe)
            return
        self._placed = (local_only, device)
        self.backend = EndpointJudge(self.cfg) if self.cfg.url else LocalJudge(self.cfg, local_only, device)

    @staticmethod
    def _key(prompt: str, completion: str, reference) -> str:
        raw = "\x00".join((prompt, completion, "" if reference is None else str(reference)))
        return hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest()

    def judge(self, prompts: list[str], completions: list[str], references: list) -> list[float | None]:
        """Scores of (prompt, completion text, reference) triples: cached ones from the cache, the rest asked at
        once."""
        keys = [self._key(p, c, r) for p, c, r in zip(prompts, completions, references)]
        todo: dict[str, str] = {}
        for k, p, c, r in zip(keys, prompts, completions, references):
            if k not in self._cache and k not in todo:
                todo[k] = render(self.rubric, p, A.strip_think(c), None if r is None else str(r))
        fresh: dict[str, float | None] = {}
        if todo:
            t0 = time.monotonic()
            try:
                results = self.backend.judge_many(list(todo.values()))
            except Exception as e:  # noqa: BLE001 - a judge that breaks (a model that will not load, ...) scores None
                self.backend.last_failure = f"{type(e).__name__}: {str(e)[:200]}"
                results = [(None, "error")] * len(todo)
            seconds = (time.monotonic() - t0) / len(todo)
            for k, (value, failure) in zip(todo, results):
                self.stats.add(STATS_NAME, calls=1, failures=int(failure is not None),
                               timeouts=int(failure == "timeout"), seconds=seconds,
                               error=f"{failure}: {self.backend.last_failure}" if failure is not None else None)
                if failure is not None:
                    self.errors.add(self.name, RuntimeError(f"{failure}: {self.backend.last_failure}"))
                    fresh[k] = None
                    continue
                fresh[k] = value
                self._cache[k] = value
                if len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        return [self._cache.get(k, fresh.get(k)) for k in keys]

    def __call__(self, completions, **kwargs) -> list[float | None]:
        n = len(completions)
        refs, prompts = kwargs.get("reference"), kwargs.get("prompts")
        refs = list(refs) if isinstance(refs, (list, tuple)) and len(refs) == n else [None] * n
        prompts = list(prompts) if isinstance(prompts, (list, tuple)) and len(prompts) == n else [""] * n
        return self.judge([prompt_text(p) for p in prompts], [A.to_text(c) for c in completions], refs)

    def score(self, text, reference, prompt=None):
        value = self.judge([prompt_text(prompt or "")], [text], [reference])[0]
        if value is None:
            return None, f"no judgement ({self.backend.last_failure})"
        return value, f"judge: {value * 10:g}/10"
