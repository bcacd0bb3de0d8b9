"""The one way compare, chat's proof and the held-out evaluation get a model's answers to held-out items: plain
generation (app/model/generation.py), or, for a run with tools, the tool loop (app/tools/loop.py) with the run's
tools behind the same guard training used, so an answer here is the one a rollout would have scored.

An environment run gives each item an instance of its environment, reset with the item's row, prompt and reference
(as TRL resets one per rollout with the row), and the instance's methods are that item's tools.
"""

from __future__ import annotations

from typing import Callable

from app.errors import UserError
from app.model.generation import format_prompt, generate, generate_ids, generate_with_images
from app.run.counts import CallCounts
from app.tools.guard import Limits, public_methods
from app.tools.loop import run_tool_loop
from app.tools.toolbox import load_toolbox


def uses_tools(run_cfg) -> bool:
    return bool(run_cfg is not None and run_cfg.tools.enabled)


def tool_names(run_cfg) -> list[str] | None:
    """What a comparison records of a run's tools: its tools.use entries and environment (None: no tools)."""
    if not uses_tools(run_cfg):
        return None
    return [*run_cfg.tools.use] + ([run_cfg.tools.environment] if run_cfg.tools.environment else [])


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


def answer_items(model, tok, items: list[dict], run_cfg, max_new_tokens: int, temperature: float = 0.0,
                 batch_size: int = 16, seed: int = 0, on_batch: Callable[[int], None] | None = None,
                 stats: CallCounts | None = None, processor=None) -> list[dict]:
    """[{text, tokens, prompt_cut} (+ turns, tool_calls, tool_failures for a tool run)] in the order of ``items``.
    Items with ``images`` are asked through ``processor`` (a model that reads images: its processor)."""
    if any(it.get("images") for it in items):
        if processor is None:
            raise UserError("these rows have images but the model was loaded without its processor; train or "
                            "compare it as a vision-language model (model.images=true)")
        return generate_with_images(model, processor, items, max_new_tokens=max_new_tokens, temperature=temperature,
                                    batch_size=batch_size, seed=seed, on_batch=on_batch)
    if not uses_tools(run_cfg):
        texts = [format_prompt(tok, it) for it in items]
        return generate(model, tok, texts, max_new_tokens=max_new_tokens, temperature=temperature,
                        batch_size=batch_size, seed=seed, on_batch=on_batch)
    tools, convs = item_tools(run_cfg, items, stats)
    out: list[dict] = []
    for start in range(0, len(items), batch_size):
        part = slice(start, start + batch_size)
        rollouts = run_tool_loop(model, tok, convs[part], tools[part], run_cfg.grpo.max_tool_calls, max_new_tokens,
                                 lambda ids, n: generate_ids(model, tok, ids, n, temperature, seed))
        out += [r.as_output() for r in rollouts]
        if on_batch:
            on_batch(len(rollouts))
    return out
