"""The OpenAI-compatible HTTP API over an Engine: /v1/models, /v1/chat/completions (streamed as server-sent events
when asked), /v1/completions.

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

# a reply's tokens when a request does not say (OpenAI's /v1/completions says 16), or what the context leaves beside the
# prompt when that is less: the snippet `serve` prints must work on a 256-token model too
DEFAULT_MAX_TOKENS = 256
ROLES = ("system", "user", "assistant")


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _text(content, param: str) -> str:
    """A message's content: a string, or OpenAI's list of parts (their text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") != "text" for p in content):
            raise BadRequest("only text content parts are served here", param)
        return "".join(str(p.get("text", "")) for p in content)
    raise BadRequest("content must be a string or a list of text parts", param)


def _messages(body: dict) -> list[dict]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("messages must be a non-empty list of {role, content}", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}", f"messages[{i}].role")
        out.append({"role": m["role"], "content": _text(m.get("content"), f"messages[{i}].content")})
    return out


def _number(body: dict, key: str, default, kind=float, low=None, high=None):
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise BadRequest(f"{key} must be a {'whole ' if kind is int else ''}number", key)
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{key} must be between {low} and {high}", key)
    return kind(value)


def _settings(body: dict) -> dict:
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return {"max_tokens": _number({"max_tokens": tokens}, "max_tokens", DEFAULT_MAX_TOKENS, int, 1, 1 << 20),
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
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1 here", "n")
    return body


async def _answer(engine, request: Request, chat: bool):
    """A chat completion (``chat``) or a text completion, whole or streamed."""
    try:
        body = await _body(engine, request)
        if chat:
            text = engine.chat_prompt(_messages(body))
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise BadRequest("prompt must be a string", "prompt")
        settings = _settings(body)
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        # a prompt that does not fit is this request's 400
        settings["max_tokens"] = engine.reply_tokens(text, None if asked is None else settings["max_tokens"],
                                                     DEFAULT_MAX_TOKENS)
    except BadRequest as e:
        return _fail(e)
    except UserError as e:
        return _fail(BadRequest(str(e)))
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
    if body.get("stream"):
        return StreamingResponse(_stream(engine, body["model"], text, settings, rid, chat),
                                 media_type="text/event-stream")
    reply, n_prompt, n_reply = await asyncio.to_thread(engine.reply, body["model"], text, **settings)
    finish = _finish(n_reply, settings)
    choice = ({"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": reply}} if chat else
              {"index": 0, "finish_reason": finish, "text": reply, "logprobs": None})
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": body["model"], "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_reply, "total_tokens": n_prompt + n_reply}}


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


def _finish(n_reply: int, settings: dict) -> str:
    return "length" if n_reply >= settings["max_tokens"] else "stop"


async def _stream(engine, model: str, text: str, settings: dict, rid: str, chat: bool):
    """Server-sent events of one reply, piece by piece as it is generated; [DONE] at the end. When the client goes
    away, the generator is closed: the reply stops at its next token."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    created = int(time.time())

    def chunk(delta: dict | str, finish: str | None = None) -> str:
        choice = ({"index": 0, "delta": delta, "finish_reason": finish} if chat else
                  {"index": 0, "text": delta, "finish_reason": finish, "logprobs": None})
        return "data: " + json.dumps({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                                      "created": created, "model": model, "choices": [choice]}) + "\n\n"

    def run():
        try:
            out = engine.reply(model, text, on_text=lambda p: loop.call_soon_threadsafe(pieces.put_nowait, p),
                               stop=stop, **settings)
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
                    yield "data: " + json.dumps(error_body(f"{type(value).__name__}: {value}", "server_error")) + "\n\n"
                else:
                    yield chunk({} if chat else "", _finish(value[2], settings))
                yield "data: [DONE]\n\n"
                return
            if piece:
                yield chunk({"content": piece} if chat else piece)
    finally:
        stop.set()  # a client that went away: generation ends at its next token
