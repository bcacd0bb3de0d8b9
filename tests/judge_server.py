"""A local OpenAI-compatible judge endpoint whose behaviour a test sets (good, garbage, hanging, refusing, flaky):
the judge's tests start a real HTTP server, never a mock client."""

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Judge(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint (/v1/models, /v1/chat/completions) whose behaviour the test sets."""

    mode = "good"
    seen: list = []
    fails_left = 0
    ok_left = 0  # answers this many well first, whatever the mode (then hangs, refuses, ... as set)
    refusal = (400, "the prompt is 292 tokens and max_tokens 64: more than the model's 256-token context")

    def log_message(self, *a):
        pass

    def _send(self, code, body):
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": "judge-7b", "object": "model", "owned_by": "me"}]})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        cls.seen.append(req)
        fmt = (req.get("response_format") or {}).get("type")
        if cls.ok_left > 0:  # the first answers are good whatever the mode: the judge passes the run's probe
            cls.ok_left -= 1
            return self._score(req)
        if cls.mode == "hang":
            time.sleep(3)
        if cls.mode == "unknown_model" and req["model"] != "judge-7b":
            return self._send(404, {"error": {"message": f"model '{req['model']}' not found"}})
        if cls.mode == "refuse":
            return self._send(cls.refusal[0], {"error": {"message": cls.refusal[1]}})
        if cls.mode == "no_json_schema" and fmt == "json_schema":
            return self._send(400, {"error": {"message": "response_format json_schema not supported"}})
        if cls.mode == "flaky" and cls.fails_left > 0:
            cls.fails_left -= 1
            return self._send(500, {"error": {"message": "overloaded"}})
        return self._score(req, garbage=cls.mode == "garbage")

    def _score(self, req, garbage=False):
        text = req["messages"][0]["content"]
        answer = text.split("Answer to grade:\n", 1)[1].split("\n", 1)[0]
        content = ("I like it a lot!" if garbage else json.dumps({"score": min(10, len(answer) % 11)}))
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": req["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}]})


class JudgeServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that gave up on a hang: nothing to report
        pass
