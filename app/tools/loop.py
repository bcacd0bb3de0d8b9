"""The tool loop outside training: chat, compare and the held-out evaluation answer with the run's tools the way a
GRPO rollout does inside TRL (``GRPOTrainer._tool_call_loop``), so a greedy answer here is what training would
have scored:

    prompt (the chat template renders the tools' schemas) -> generate -> TRL's parser reads tool calls ->
    each call through the guard (app/tools/guard.py) -> the calls and their results appended -> generate again,
    at most ``max_calls`` rounds; the answer is the last assistant turn.

Generated tokens and the tool results' tokens share one budget (``max_new_tokens``, as TRL's max_completion_length):
a round that would pass it is not started. Batched: every row still calling tools generates together. A prompt longer
than the model's context leaves beside a round's tokens keeps its end, as plain generation cuts it
(app/model/generation.fit_prompt), and its answer is marked ``prompt_cut``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from app.model.generation import fit_prompt
from app.model.placement import context_length
from app.model.templates import ensure_tool_parser
from app.tools.guard import ToolFailed, error_result

MIN_ROUND_TOKENS = 8  # a round with less room than this could not say anything useful


@dataclass
class Rollout:
    """One answer with its tool calls: ``turns`` are the messages after the prompt (assistant calls, tool results,
    the final assistant turn)."""

    text: str
    tokens: int
    turns: list[dict] = field(default_factory=list)
    calls: int = 0
    failures: int = 0
    prompt_cut: bool = False

    def as_output(self) -> dict:
        """The shape generation.generate returns, with the transcript (compare's cells keep it)."""
        return {"text": self.text, "tokens": self.tokens, "prompt_cut": self.prompt_cut, "turns": self.turns,
                "tool_calls": self.calls, "tool_failures": self.failures}


def call_tool(tools: dict[str, Callable], call: dict) -> tuple[str, str, bool]:
    """(name, the tool turn's text, ok) for one parsed call, as TRL makes it: an unknown tool, bad arguments or a
    failure is an error result."""
    fn = call.get("function") or {}
    name = fn.get("name") or call.get("name") or "unknown"
    args = fn.get("arguments")
    try:
        if call.get("type", "function") != "function":
            raise ToolFailed(f"Unsupported tool call type: {call.get('type')}")
        if name not in tools:
            raise ToolFailed(f"Tool {name} not found.")
        if not isinstance(args, dict):
            raise ToolFailed(f"the arguments of {name} must be a JSON object")
        result = tools[name](**args)
    except Exception as e:  # noqa: BLE001 - every failure is the model's to see, never the loop's end
        return name, error_result(str(e)), False
    return name, result if isinstance(result, str) else str(result), True


def describe_call(turn: dict) -> list[str]:
    """A transcript's lines for one turn: ``calculator(expression='1 + 2')`` for a call, ``-> 3`` for a result."""
    if turn.get("role") == "tool":
        return [f"-> {turn.get('content')}"]
    out = []
    for call in turn.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else repr(args)
        out.append(f"{fn.get('name')}({shown})")
    return out


def transcript_lines(turns: list[dict]) -> list[str]:
    """Every call and result of an answer, in order (compare's tables, chat, the HTML report)."""
    return [line for t in turns[:-1] for line in describe_call(t)] if turns else []


def call_lines(turns: list[dict]) -> list[str]:
    """Each call with its result on one line: ``> calculator(expression='1 + 2') -> 3``."""
    lines, out = transcript_lines(turns), []
    for line in lines:
        if line.startswith("-> ") and out:
            out[-1] += " " + line
        else:
            out.append("> " + line)
    return out


def read_turn(tok, ids: list[int], prefix: list[int], tools) -> tuple[str, list[dict] | None]:
    """(content, tool calls or None) of a generated assistant turn, read by TRL's parser as training reads a rollout's
    calls (the tokenizer's parser set: app/model/templates.ensure_tool_parser). The tool loop's and the API server's."""
    from trl.chat_template_utils import parse_response  # heavy: TRL's parser, the one training reads calls with

    parsed = parse_response(tok, ids, prefix=prefix, tools=tools or None) if ids else {}
    return parsed.get("content") or "", parsed.get("tool_calls") or None


def _render(tok, messages: list[dict], tools: list[Callable]) -> list[int]:
    """The conversation's token ids up to the next assistant turn, the tools' schemas rendered by the template."""
    return tok.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=True,
                                   return_dict=False)


def run_tool_loop(model, tok, conversations: list[list[dict]], tools: list[list[Callable]], max_calls: int,
                  max_new_tokens: int, generate_batch: Callable) -> list[Rollout]:
    """Answer each conversation with its tools (``tools[i]``: conversation i's guarded callables; the chat template
    renders their schemas from their signatures and docstrings, as TRL's does).

    ``generate_batch(prompt_ids: list[list[int]], max_new_tokens) -> list[list[int]]`` generates one batch (the
    caller's generation path: greedy or sampled, one model or the base side)."""
    ensure_tool_parser(tok)
    by_name = [{f.__name__: f for f in row} for row in tools]
    msgs = [list(c) for c in conversations]
    turns: list[list[dict]] = [[] for _ in conversations]
    used = [0] * len(conversations)
    calls = [0] * len(conversations)
    failures = [0] * len(conversations)
    done: list[bool] = [False] * len(conversations)
    cut = [False] * len(conversations)
    context = context_length(model.config)
    prompt_len = [len(_render(tok, m, t)) for m, t in zip(msgs, tools)]
    for round_ in range(max_calls + 1):
        active = [i for i, d in enumerate(done) if not d and max_new_tokens - used[i] >= MIN_ROUND_TOKENS]
        if not active:
            break
        prompts = [_render(tok, msgs[i] + turns[i], tools[i]) for i in active]
        budget = max(max_new_tokens - used[i] for i in active)
        fitted = [fit_prompt(tok, p, None if context is None else max(1, context - budget)) for p in prompts]
        for i, (_, was_cut) in zip(active, fitted):
            cut[i] = cut[i] or was_cut
        new = generate_batch([ids for ids, _ in fitted], budget)
        for i, p, ids in zip(active, prompts, new):
            ids = ids[:max_new_tokens - used[i]]  # each answer within its own budget, as TRL cuts it
            used[i] += len(ids)
            content, asked = read_turn(tok, ids, p, tools[i])
            message = {"role": "assistant", "content": content}
            wanted = asked if round_ < max_calls else None
            if wanted:
                message["tool_calls"] = wanted
            turns[i].append(message)
            if not wanted:
                done[i] = True
                continue
            for call in wanted:
                name, text, ok = call_tool(by_name[i], call)
                calls[i] += 1
                failures[i] += not ok
                turns[i].append({"role": "tool", "name": name, "content": text})
        # the tool results' tokens count in the budget too, as TRL counts them
        for i in active:
            if not done[i]:
                used[i] = len(_render(tok, msgs[i] + turns[i], tools[i])) - prompt_len[i]
    out = []
    for i in range(len(conversations)):
        last = next((t for t in reversed(turns[i]) if t["role"] == "assistant" and not t.get("tool_calls")), None)
        out.append(Rollout(text=(last or {}).get("content", "").strip(), tokens=used[i], turns=turns[i],
                           calls=calls[i], failures=failures[i], prompt_cut=cut[i]))
    return out
