"""What an OpenAI request asks, read and checked: its fields, messages (tool calls and tool results too), stop
strings and tools. Every field is either honoured or refused with a 400 naming it, never dropped: ``HONOURED``
fields are served, ``AT_DEFAULT`` ones only at the value that means "nothing asked" (a sampling knob this server does
not have, log-probabilities, constrained output), anything else is an unknown field.

Owns: reading a request. Must not load or run a model (the engine does) nor shape a reply (api.py).
"""

from __future__ import annotations

import json

from app.data.images import checked_image, decoded
from app.host.net import public_address
from app.host.offline import hub_offline

ROLES = ("system", "user", "assistant", "tool")
MAX_STOPS = 16  # OpenAI takes up to 4; lm-eval sends a task's `until` with the EOS (more on some tasks), as vLLM takes
# the fields served; "user" and "parallel_tool_calls" are a client's bookkeeping and the model's own choice
HONOURED = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "seed", "stream",
            "stream_options", "n", "stop", "tools", "tool_choice", "user", "parallel_tool_calls", "logprobs",
            "top_logprobs", "echo", "return_tokens_as_token_ids"}
# the fields taken only at these values: anything else asks for what this server does not do
AT_DEFAULT = {"top_p": (1, None), "presence_penalty": (0, None), "frequency_penalty": (0, None),
              "best_of": (1, None), "logit_bias": (None, {}), "suffix": (None, ""),
              "response_format": ({"type": "text"}, None)}
WHY_NOT = {"response_format": "no constrained decoding here; ask for the format in the prompt"}
MAX_TOP_LOGPROBS = 20  # alternatives per token (OpenAI's chat limit; vLLM's default cap)


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def check_fields(body: dict) -> None:
    """A 400 naming the first field this server would otherwise ignore."""
    for key, value in body.items():
        if key in HONOURED:
            continue
        if key in AT_DEFAULT:
            if value in AT_DEFAULT[key] and not isinstance(value, bool):
                continue
            shown = value.get("type") if key == "response_format" and isinstance(value, dict) else value
            why = WHY_NOT.get(key, f"this server samples with temperature alone; send {key}="
                                   f"{AT_DEFAULT[key][0]!r} or leave it out")
            raise BadRequest(f"{key}={shown!r} is not served: {why}", key)
        raise BadRequest(f"unknown field '{key}': this server takes {', '.join(sorted(HONOURED | set(AT_DEFAULT)))}",
                         key)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise BadRequest("stream_options takes only include_usage", "stream_options")
        if not body.get("stream"):
            raise BadRequest("stream_options goes with stream: true", "stream_options")


def logprobs(body: dict, chat: bool) -> tuple[int | None, bool]:
    """(alternatives per token, or None when no log-probabilities are asked; echo): chat's ``logprobs: true`` with
    ``top_logprobs: k``, or completions' ``logprobs: k`` with ``echo`` (the prompt's own tokens scored too, as
    lm-evaluation-harness's loglikelihood requests ask). On whole replies only."""
    if chat:
        asked, top = body.get("logprobs"), body.get("top_logprobs")
        if asked not in (None, True, False):
            raise BadRequest("logprobs must be true or false on chat completions", "logprobs")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int)
                                or not 0 <= top <= MAX_TOP_LOGPROBS):
            raise BadRequest(f"top_logprobs must be a whole number from 0 to {MAX_TOP_LOGPROBS}", "top_logprobs")
        if top and not asked:
            raise BadRequest("top_logprobs goes with logprobs: true", "top_logprobs")
        if body.get("echo") is not None:
            raise BadRequest("echo goes with /v1/completions", "echo")
        wanted, echo = (top or 0) if asked else None, False
    else:
        wanted, echo = body.get("logprobs"), body.get("echo", False)
        if body.get("top_logprobs") is not None:
            raise BadRequest("top_logprobs goes with /v1/chat/completions; completions take logprobs: N",
                             "top_logprobs")
        if wanted is not None and (isinstance(wanted, bool) or not isinstance(wanted, int)
                                   or not 0 <= wanted <= MAX_TOP_LOGPROBS):
            raise BadRequest(f"logprobs must be a whole number from 0 to {MAX_TOP_LOGPROBS} on completions",
                             "logprobs")
        if echo not in (True, False, None):
            raise BadRequest("echo must be true or false", "echo")
        echo = bool(echo)
    if (wanted is not None or echo) and body.get("stream"):
        raise BadRequest("logprobs and echo are returned on whole replies here; drop stream",
                         "logprobs" if wanted is not None else "echo")
    return wanted, echo


def prompts(body: dict) -> list[tuple[str | None, list[int] | None]]:
    """A completion request's prompts as (text, token ids): a string, a list of strings, a list of token ids, or a
    list of such lists (each a choice of its own, as lm-evaluation-harness sends a batch)."""
    value = body.get("prompt")
    ids = lambda x: isinstance(x, list) and bool(x) and all(  # noqa: E731
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in x)
    if isinstance(value, str):
        return [(value, None)]
    if ids(value):
        return [(None, value)]
    if isinstance(value, list) and value and all(isinstance(v, str) or ids(v) for v in value):
        return [(v, None) if isinstance(v, str) else (None, v) for v in value]
    raise BadRequest("prompt must be a string, a list of strings, a list of token ids or a list of such lists",
                     "prompt")


def stops(body: dict) -> list[str]:
    """The request's stop strings (a string or a list of up to MAX_STOPS)."""
    value = body.get("stop")
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or len(values) > MAX_STOPS or not all(isinstance(v, str) and v for v in values):
        raise BadRequest(f"stop must be a non-empty string or a list of up to {MAX_STOPS} of them", "stop")
    return values


def _text(content, param: str) -> str:
    """A message's content: a string, or OpenAI's list of parts (their text parts joined; image parts are read by
    ``images``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") not in ("text", "image_url") for p in content):
            raise BadRequest("only text and image_url content parts are served here", param)
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    raise BadRequest("content must be a string or a list of text / image_url parts", param)


def images(body: dict, local_only: bool, fetch_internal: bool = False) -> list:
    """The request's pictures (OpenAI's image_url parts, in order) as PIL images: a data URL is decoded; an http(s)
    URL is fetched only where downloads are allowed (under --local-only or HF_HUB_OFFLINE it is a 400, never a
    fetch), from a public address only (loopback, private and link-local ones are a 400 after DNS, on every redirect
    too, unless ``fetch_internal``: serve --fetch-internal-urls), within app/host/net.fetch's few seconds and size
    cap. Anything else (a path, file:, ...) is a 400 that says nothing of the server's disk: a request never has the
    server read a file (whether it exists, whether it is an image), whoever sends it."""
    out = []
    for i, m in enumerate(body.get("messages") or []):
        parts = m.get("content") if isinstance(m, dict) else None
        for j, part in enumerate(parts if isinstance(parts, list) else []):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            param = f"messages[{i}].content[{j}].image_url"
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str) or not url.strip():
                raise BadRequest("image_url needs a url (a data: URL with the image)", param)
            remote = url.startswith(("http://", "https://"))
            if not remote and not url.startswith("data:"):
                raise BadRequest("image_url must be a data: URL (data:image/png;base64,...) or an http(s) URL; this "
                                 "server reads no files", param)
            if remote and (local_only or hub_offline()):
                raise BadRequest("remote image URLs are not fetched by this server (--local-only or "
                                 "HF_HUB_OFFLINE); send the image as a data URL (data:image/png;base64,...)", param)
            try:
                allow = (lambda _ip: True) if fetch_internal else public_address
                out.append(decoded([{"bytes": checked_image(url, None, local_only, allow=allow)}])[0])
            except (ValueError, OSError) as e:
                fix = ("; send the image as a data URL (data:image/png;base64,...)" if remote else "")
                raise BadRequest(f"this image_url {e}{fix}", param) from None
    return out


def _calls(calls, param: str) -> tuple[list[dict], dict[str, str]]:
    """An assistant turn's ``tool_calls`` as the chat template renders them (arguments as an object), and
    {call id: tool name} for the tool turns that answer them."""
    if not isinstance(calls, list):
        raise BadRequest("tool_calls must be a list", param)
    out, names = [], {}
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest("each tool call needs function.name and function.arguments", f"{param}[{j}]")
        args = fn.get("arguments") or "{}"
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            raise BadRequest("function.arguments must be a JSON object (as a string)", f"{param}[{j}]") from None
        if not isinstance(args, dict):
            raise BadRequest("function.arguments must be a JSON object", f"{param}[{j}]")
        out.append({"type": "function", "function": {"name": fn["name"], "arguments": args}})
        if call.get("id"):
            names[str(call["id"])] = fn["name"]
    return out, names


def messages(body: dict) -> list[dict]:
    """The conversation as the chat template takes it: an assistant's tool calls with their arguments as objects,
    a tool result named by the call it answers (the form the tool loop builds: app/tools/loop.py)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("messages must be a non-empty list of {role, content}", "messages")
    out, called = [], {}
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}", f"messages[{i}].role")
        turn = {"role": m["role"], "content": _text(m.get("content"), f"messages[{i}].content")}
        if m["role"] == "assistant" and m.get("tool_calls"):
            turn["tool_calls"], names = _calls(m["tool_calls"], f"messages[{i}].tool_calls")
            called.update(names)
        if m["role"] == "tool":
            name = m.get("name") or called.get(str(m.get("tool_call_id")))
            if not name:
                raise BadRequest("a tool message needs the tool_call_id of an earlier assistant tool call",
                                 f"messages[{i}].tool_call_id")
            turn["name"] = name
        out.append(turn)
    return out


def tools(body: dict) -> list[dict] | None:
    """The request's tools (OpenAI's function form, as the chat template renders them), or None: no tools, or
    tool_choice "none". A forced choice ("required", a named function) is a 400: the model chooses here."""
    given = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if given is None or given == []:
        if choice not in ("auto", "none", None):
            raise BadRequest("tool_choice needs tools", "tool_choice")
        return None
    if not isinstance(given, list) or not all(isinstance(t, dict) and t.get("type") == "function"
                                              and isinstance(t.get("function"), dict)
                                              and isinstance(t["function"].get("name"), str) for t in given):
        raise BadRequest("tools must be a list of {type: function, function: {name, description, parameters}}",
                         "tools")
    if choice == "none":
        return None
    if choice not in ("auto", None):
        raise BadRequest("tool_choice must be auto or none here: the model decides whether to call", "tool_choice")
    return given
