"""The OpenAI-compatible HTTP API over an Engine: /v1/models, /v1/chat/completions (streamed as server-sent events
when asked), /v1/completions.

What a request may ask and how it is read is app/serve/requests.py (every field honoured or refused, never
dropped); stop strings end a reply before them, streamed or not; a tools request gets its calls back as
``tool_calls`` (TRL's parser, as training reads them) and sends their results as ``tool`` messages.
Log-probabilities (chat's logprobs / top_logprobs; completions' logprobs and echo, a prompt sent as token ids, several
prompts as several choices: what lm-evaluation-harness's local-completions client sends) are the model's own, read
by one forward pass over the prompt and the reply (app/ask/logprobs.token_logprobs), on whole replies.
Every problem with a request is an OpenAI-style error ``{"error": {"message", "type", "param", "code"}}`` with its
status (400 a bad request, 401 a missing or wrong key, 404 an unknown model or route, 500 a failure while
generating), never a crashed server. With an API key, every route asks for ``Authorization: Bearer KEY``. A streamed
reply whose client goes away stops generating at the next token (the model is freed for the next request).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from app.errors import UserError
from app.serve import requests as R
from app.serve.engine import Reply
from app.serve.requests import BadRequest

# a reply's tokens when a request does not say (OpenAI's /v1/completions says 16), or what the context leaves beside the
# prompt when that is less: the snippet `serve` prints must work on a 256-token model too
DEFAULT_MAX_TOKENS = 256


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _number(body: dict, key: str, default, kind=float, low=None, high=None):
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise BadRequest(f"{key} must be a {'whole ' if kind is int else ''}number", key)
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{key} must be between {low} and {high}", key)
    return kind(value)


def _settings(body: dict, echo: bool = False) -> dict:
    """Sampling settings; max_tokens 0 only with echo (the prompt scored, nothing generated)."""
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return {"max_tokens": _number({"max_tokens": tokens}, "max_tokens", DEFAULT_MAX_TOKENS, int, 0 if echo else 1,
                                  1 << 20),
            "temperature": _number(body, "temperature", 1.0, float, 0, 2),
            "seed": _number(body, "seed", 0, int, 0, 2**63 - 1)}


def _fail(e: BadRequest) -> JSONResponse:
    kind = "authentication_error" if e.status == 401 else "invalid_request_error"
    return JSONResponse(error_body(str(e), kind, e.param, e.code), status_code=e.status)


async def _body(engine, request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("model") not in engine.names:
        raise BadRequest(f"model {body.get('model')!r} is not served here; use one of {', '.join(engine.names)}",
                         "model", 404, "model_not_found")
    if body.get("n", 1) not in (1, None):
        raise BadRequest("n must be 1 here", "n")
    R.check_fields(body)
    return body


async def _answer(engine, request: Request, chat: bool):
    """A chat completion (``chat``) or a text completion (one choice per prompt), whole or streamed; with
    log-probabilities when asked (whole replies)."""
    try:
        body = await _body(engine, request)
        tools = R.tools(body) if chat else None
        if not chat and body.get("tools") is not None:
            raise BadRequest("tools go with /v1/chat/completions", "tools")
        pictures = R.images(body, engine.local_only, engine.fetch_internal) if chat else []
        if pictures:
            engine.asker.path(True)  # a model that reads none: the one refusal, this request's 400
        top, echo = R.logprobs(body, chat)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        if top is not None and (tools or pictures):
            raise BadRequest("log-probabilities are returned for text replies here, without tools or pictures",
                             "logprobs")
        asks = [(engine.chat_prompt(msgs := R.messages(body), tools), None)] if chat else R.prompts(body)
        if len(asks) > 1 and body.get("stream"):
            raise BadRequest("a streamed completion takes one prompt here", "prompt")
        settings = _settings(body, echo)
        settings["stops"] = R.stops(body)
        if pictures:  # a chat about pictures: the engine asks the model with them (app/model/generation.py)
            settings.update(images=pictures, messages=msgs)
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        # each prompt's text and reply length; a prompt that does not fit is this request's 400
        prompts = [_prompt(engine, text, ids, None if asked is None else settings["max_tokens"]) for text, ids in asks]
    except BadRequest as e:
        return _fail(e)
    except UserError as e:
        return _fail(BadRequest(str(e)))
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
    usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if body.get("stream"):
        (text, ids, tokens), = prompts
        return StreamingResponse(_stream(engine, body["model"], text, {**settings, "max_tokens": tokens,
                                                                       "prompt_ids": ids}, rid, chat, tools, usage),
                                 media_type="text/event-stream")
    choices, outs = [], []
    for i, (text, ids, tokens) in enumerate(prompts):
        asked_here = {**settings, "max_tokens": tokens}
        out = (await asyncio.to_thread(engine.reply, body["model"], text, **asked_here, prompt_ids=ids) if tokens
               else Reply("", len(ids), 0))  # max_tokens 0 with echo: the prompt alone, scored; nothing generated
        outs.append(out)
        scored = (await asyncio.to_thread(engine.logprobs, body["model"], ids, out, top, echo) if top is not None
                  else None)
        content, calls = engine.tool_calls(out.text, text, tools) if tools else (out.text, None)
        finish = "tool_calls" if calls else _finish(out, asked_here)
        if chat:
            message = {"role": "assistant", "content": content if content or not calls else None}
            if calls:
                message["tool_calls"] = calls
            choice = {"index": i, "finish_reason": finish, "message": message}
            if top is not None:
                choice["logprobs"] = {"content": _chat_logprobs(engine.tok, scored, as_ids), "refusal": None}
        else:
            choice = {"index": i, "finish_reason": finish, "text": (text if echo else "") + out.text,
                      "logprobs": _completion_logprobs(engine.tok, scored, as_ids) if top is not None else None}
        choices.append(choice)
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": body["model"], "choices": choices, "usage": _usage(*outs)}


def _prompt(engine, text: str | None, ids: list[int] | None, asked: int | None) -> tuple[str, list[int], int]:
    """(text, token ids, reply tokens) of one prompt, tokenized once here (the reply and its log-probabilities read
    these ids): a prompt sent as token ids is checked against the vocabulary and read back as text (what echo
    returns); either is checked against the context."""
    if ids is None:
        ids = engine.ids(text, 0)
    else:
        text = engine.tok.decode(engine.checked_ids(ids, 0))
    return text, ids, engine.reply_tokens(ids, asked, DEFAULT_MAX_TOKENS)


def _piece(tok, token: int, as_ids: bool = False) -> str:
    """A token as a reply names it: its text, or (vLLM's return_tokens_as_token_ids) ``token_id:N``, which a client
    maps back to the id without two tokens spelled alike colliding (a distillation teacher's top-k: app/teacher)."""
    return f"token_id:{token}" if as_ids else tok.decode([token])


def _completion_logprobs(tok, scored: list[tuple], as_ids: bool = False) -> dict:
    """/v1/completions' logprobs: tokens, token_logprobs, top_logprobs ({token: log-probability}; None for an echoed
    prompt's first token, which has no context) and text_offset (each token's start in the returned text)."""
    tokens = [_piece(tok, t, as_ids) for t, _, _ in scored]
    offsets, at = [], 0
    for piece in tokens:
        offsets.append(at)
        at += len(piece)
    return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in scored],
            "top_logprobs": [None if lp is None else {_piece(tok, a, as_ids): v for a, v in alts}
                             for _, lp, alts in scored],
            "text_offset": offsets}


def _chat_logprobs(tok, scored: list[tuple], as_ids: bool = False) -> list[dict]:
    """/v1/chat/completions' logprobs.content: each reply token with its log-probability, its bytes and its
    top_logprobs alternatives."""
    def entry(token: int, lp: float) -> dict:
        piece = _piece(tok, token, as_ids)
        return {"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8"))}

    return [{**entry(t, lp), "top_logprobs": [entry(a, v) for a, v in alts]} for t, lp, alts in scored]


def _usage(*outs) -> dict:
    prompt, reply = sum(o.prompt_tokens for o in outs), sum(o.reply_tokens for o in outs)
    return {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply}


def build_api(engine, api_key: str | None = None) -> FastAPI:
    """The FastAPI app serving ``engine``."""
    api = FastAPI(title="qlora-app", docs_url=None, redoc_url=None, openapi_url=None)

    @api.middleware("http")
    async def guard(request: Request, call_next):
        if api_key:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return _fail(BadRequest("a valid API key is required: Authorization: Bearer KEY", status=401,
                                        code="invalid_api_key"))
        try:
            return await call_next(request)
        except Exception as e:  # noqa: BLE001 - a failure while answering is this request's, never the server's
            return JSONResponse(error_body(f"{type(e).__name__}: {str(e)[:300]}", "server_error"), status_code=500)

    @api.exception_handler(404)
    async def not_found(request: Request, exc):
        return _fail(BadRequest(f"no route {request.url.path}; this server has /v1/models, /v1/chat/completions and "
                                "/v1/completions", status=404))

    @api.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": n, "object": "model", "created": engine.created,
                                            "owned_by": "qlora-app"} for n in engine.names]}

    @api.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _answer(engine, request, chat=True)

    @api.post("/v1/completions")
    async def completions(request: Request):
        return await _answer(engine, request, chat=False)

    return api


def _finish(out, settings: dict) -> str:
    """A reply that met a stop string or ended on its own: "stop"; one cut at max_tokens: "length"."""
    return "length" if not out.stopped_at and out.reply_tokens >= settings["max_tokens"] else "stop"


async def _stream(engine, model: str, text: str, settings: dict, rid: str, chat: bool, tools=None,
                  usage: bool = False):
    """Server-sent events of one reply, piece by piece as it is generated; [DONE] at the end. When the client goes
    away, the generator is closed: the reply stops at its next token. With tools, the reply is read whole first
    (a call is only known at its end) and sent as one content piece or as its tool calls. ``usage``:
    stream_options.include_usage, a last chunk with the token counts."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    created = int(time.time())

    def chunk(delta: dict | str, finish: str | None = None) -> str:
        choice = ({"index": 0, "delta": delta, "finish_reason": finish} if chat else
                  {"index": 0, "text": delta, "finish_reason": finish, "logprobs": None})
        return _event({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                       "created": created, "model": model, "choices": [choice]})

    def run():
        try:
            on_text = None if tools else (lambda p: loop.call_soon_threadsafe(pieces.put_nowait, p))
            out = engine.reply(model, text, on_text=on_text, stop=stop, **settings)
            loop.call_soon_threadsafe(pieces.put_nowait, ("end", out))
        except Exception as e:  # noqa: BLE001 - said to the client as the stream's last event
            loop.call_soon_threadsafe(pieces.put_nowait, ("error", e))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        if chat:
            yield chunk({"role": "assistant", "content": ""})
        while True:
            piece = await pieces.get()
            if isinstance(piece, tuple):
                kind, value = piece
                if kind == "error":
                    yield _event(error_body(f"{type(value).__name__}: {value}", "server_error"))
                else:
                    finish = _finish(value, settings)
                    if tools:
                        content, calls = engine.tool_calls(value.text, text, tools)
                        if content:
                            yield chunk({"content": content})
                        if calls:
                            yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
                            finish = "tool_calls"
                    yield chunk({} if chat else "", finish)
                    if usage:
                        yield _event({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                                      "created": created, "model": model, "choices": [], "usage": _usage(value)})
                yield "data: [DONE]\n\n"
                return
            if piece:
                yield chunk({"content": piece} if chat else piece)
    finally:
        stop.set()  # a client that went away: generation ends at its next token


def _event(data: dict) -> str:
    return "data: " + json.dumps(data) + "\n\n"
