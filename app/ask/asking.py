"""The one way to ask a model: a request (``Ask``: a conversation, its pictures) and one dispatcher (``Asker``) that
compare, the held-out points during training, chat, the API server and the held-out preference log-probs all use.

The dispatcher decides the path once, in one order:
  1. pictures: the processor's path (app/model/generation.generate_with_images; the log-probs: preference's image
     path). A model loaded without a processor (a run trained on text) refuses them here, in one line (NO_IMAGES);
  2. a run's tools, where the caller runs them (compare, the held-out points, chat): the tool loop
     (app/tools/loop.py) with the run's tools behind the guard training used, so an answer here is the one a
     rollout would have scored. An API client runs its own tools (OpenAI's protocol): the server asks on the text
     path with the client's tool schemas in the prompt;
  3. otherwise plain text generation (app/model/generation.py).
A run on pictures with tools is refused by the plan (app/train/planning/images.py), so no run takes both paths.

The run's system prompt comes first when a conversation has none of its own: app/model/pair.system_first, the one
rule every path applies (held-out rows already carry it as training formatted them: app/data/turns.with_system).

An environment run gives each item an instance of its environment, reset with the item's row, prompt and reference
(as TRL resets one per rollout with the row), and the instance's methods are that item's tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from app.errors import UserError
from app.ask.logprobs import image_logprobs, text_logprobs, token_logprobs
from app.model.generation import format_prompt, generate, generate_ids, generate_one, generate_with_images
from app.model.pair import plain_conversation, system_first
from app.run.counts import CallCounts
from app.tools.guard import Limits, public_methods
from app.tools.loop import run_tool_loop
from app.tools.toolbox import load_toolbox

NO_IMAGES = "this run's model reads no images (it was trained on text)"  # the one refusal of pictures
# said (not refused) where a run trained on pictures is asked without one: it answers, from the text alone
NO_PICTURE = "this run was trained on pictures and is asked without one: it answers from the text alone"


def check_generation(temperature: float, max_new_tokens: int, batch_size: int = 1) -> None:
    """The generation settings a command asks with, checked in one place (chat, compare): one line each."""
    if temperature < 0:
        raise UserError(f"--temperature must be >= 0 (got {temperature}); 0 means greedy")
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1 (got {max_new_tokens})")
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1 (got {batch_size})")


def uses_tools(run_cfg) -> bool:
    return bool(run_cfg is not None and run_cfg.tools.enabled)


def tool_names(run_cfg) -> list[str] | None:
    """What a comparison records of a run's tools: its tools.use entries and environment (None: no tools)."""
    if not uses_tools(run_cfg):
        return None
    return [*run_cfg.tools.use] + ([run_cfg.tools.environment] if run_cfg.tools.environment else [])


def route(images: bool, processor, run_cfg, run_tools: bool = True, fix: str = "send text only") -> str:
    """The path a request takes ("images", "tools" or "text"), in the one order above; pictures for a model without
    a processor are one line (``fix``: what the caller's user can do instead)."""
    if images:
        if processor is None:
            raise UserError(f"{NO_IMAGES}; {fix}")
        return "images"
    return "tools" if run_tools and uses_tools(run_cfg) else "text"


@dataclass
class Ask:
    """One request to a model: the conversation (the run's system prompt first when it has none) and its pictures.
    ``plain``: the prompt for a tokenizer without a chat template (held-out rows carry it as training wrote it)."""

    messages: list[dict]
    images: list = field(default_factory=list)
    plain: str | None = None

    @classmethod
    def of(cls, messages: list[dict], system: str | None = None, images=()) -> Ask:
        msgs = system_first(messages, system)
        return cls(msgs, list(images or []), plain_conversation(messages, system))

    def item(self) -> dict:
        """As compare's and the held-out evaluation's items are written (messages, images, plain)."""
        return {"messages": self.messages, "images": self.images, "plain": self.plain}


@dataclass
class Answer:
    text: str
    turns: list[dict] | None = None  # a tool run: the calls and results before the answer
    ids: list[int] | None = None  # the text path: the token ids generated (what `serve` scores for logprobs)


def item_tools(run_cfg, items: list[dict], stats: CallCounts | None = None) -> tuple[list[list[Callable]], list]:
    """(each item's guarded tools, each item's conversation): the environment's observation from reset() appended
    to the item's last user turn, as TRL appends it."""
    functions, environment = load_toolbox(run_cfg.tools).guarded(Limits.of(run_cfg.tools), stats or CallCounts())
    tools, convs = [], []
    for it in items:
        msgs = [dict(m) for m in it["messages"]]
        own = list(functions)
        if environment is not None:
            env = environment()
            # the row's columns, its prompt and reference as training formats them (TRL resets with the row)
            row = {**(it.get("row") or {}), "prompt": it["messages"], "reference": it.get("reference")}
            try:
                observation = env.reset(**row)
            except Exception as e:  # noqa: BLE001 - the user's environment: one line, not a traceback
                raise UserError(f"environment {environment.__name__}.reset() failed ({type(e).__name__}: {e}) on a "
                                f"row with the columns {', '.join(row)}; fix reset() (chat gives it no row)") from None
            if isinstance(observation, str) and msgs:
                msgs[-1]["content"] = msgs[-1]["content"] + observation
            own += [getattr(env, n) for n in public_methods(environment)]
        tools.append(own)
        convs.append(msgs)
    return tools, convs


class Asker:
    """Asks one loaded model (``model`` with its tokenizer, and its ``processor`` for a model that reads images) on
    behalf of a run (``run_cfg``: its tools; None: a model asked without a run). ``run_tools``: whether this caller
    runs the run's tools (compare, chat, the held-out points) or its client does (the API server)."""

    def __init__(self, model, tok, processor=None, run_cfg=None, run_tools: bool = True, fix: str = "send text only"):
        self.model, self.tok, self.processor, self.run_cfg = model, tok, processor, run_cfg
        self.run_tools, self.fix = run_tools, fix

    def path(self, images: bool) -> str:
        return route(images, self.processor, self.run_cfg, self.run_tools, self.fix)

    def missing_picture(self, images: bool) -> str | None:
        """NO_PICTURE for a run trained on pictures asked without one (chat, the API server say it), else None."""
        trained = self.run_cfg is not None and bool(self.run_cfg.model.images)
        return NO_PICTURE if trained and not images else None

    def answers(self, items: list[dict], max_new_tokens: int, temperature: float = 0.0, batch_size: int = 16,
                seed: int = 0, on_batch: Callable[[int], None] | None = None,
                stats: CallCounts | None = None) -> list[dict]:
        """[{text, tokens, prompt_cut} (+ turns, tool_calls, tool_failures for a tool run)] in the order of
        ``items`` (compare's and the held-out evaluation's rows: messages, plain, images, reference, row)."""
        path = self.path(any(it.get("images") for it in items))
        model, tok = self.model, self.tok
        if path == "images":
            return generate_with_images(model, self.processor, items, max_new_tokens=max_new_tokens,
                                        temperature=temperature, batch_size=batch_size, seed=seed, on_batch=on_batch)
        if path == "text":
            return generate(model, tok, [format_prompt(tok, it) for it in items], max_new_tokens=max_new_tokens,
                            temperature=temperature, batch_size=batch_size, seed=seed, on_batch=on_batch)
        tools, convs = item_tools(self.run_cfg, items, stats)
        out: list[dict] = []
        for start in range(0, len(items), batch_size):
            part = slice(start, start + batch_size)
            rollouts = self._rollouts(convs[part], tools[part], max_new_tokens, temperature, seed)
            out += [r.as_output() for r in rollouts]
            if on_batch:
                on_batch(len(rollouts))
        return out

    def _rollouts(self, convs: list, tools: list, max_new_tokens: int, temperature: float, seed: int) -> list:
        """The tool loop of training (app/tools/loop.py) over ``convs``, each with its own guarded ``tools``."""
        model, tok = self.model, self.tok
        return run_tool_loop(model, tok, convs, tools, self.run_cfg.grpo.max_tool_calls, max_new_tokens,
                             lambda ids, n: generate_ids(model, tok, ids, n, temperature, seed))

    def one(self, ask: Ask, ids: list[int] | None, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
            on_text: Callable[[str], None] | None = None, stop=None, tools: list | None = None) -> Answer:
        """One conversation's answer (chat, the API server). ``ids``: its prompt's token ids on the text path, as the
        caller fitted them to the context; ``tools``: a tool run's guarded tools for this conversation. The text
        path streams through ``on_text`` and honours ``stop``; pictures and tool loops answer whole."""
        path = self.path(bool(ask.images))
        if path == "images":
            text = generate_with_images(self.model, self.processor, [ask.item()], max_new_tokens, temperature,
                                        seed=seed)[0]["text"]
            return Answer(text)
        if path == "tools":
            rollout = self._rollouts([ask.messages], [tools], max_new_tokens, temperature, seed)[0]
            return Answer(rollout.text, rollout.turns)
        text, new = generate_one(self.model, self.tok, ids, max_new_tokens, temperature, seed, on_text, stop)
        return Answer(text, ids=new)

    def token_logprobs(self, ids: list[int], start: int, top: int = 0) -> list[tuple[int, float, list]]:
        """Each token's log-probability from ``start`` on, with the ``top`` most likely alternatives (a text
        prompt: app/ask/logprobs.token_logprobs; `serve`'s logprobs and echo)."""
        return token_logprobs(self.model, ids, start, top)

    def logprobs(self, items: list[dict]) -> list[tuple[float, float]]:
        """The held-out pairs' (chosen, rejected) summed log-probabilities (app/eval/preference.py), the pictures
        read with them on the image path."""
        if self.path(any(it.get("images") for it in items)) == "images":
            return image_logprobs(self.model, self.tok, self.processor, items)
        return text_logprobs(self.model, self.tok, items)
