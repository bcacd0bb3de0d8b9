"""An endpoint teacher that is down, too slow or returns no log-probabilities is one line naming it and the cause
(the probe refuses it before the student loads; mid-run the client retries first); token names that are not ids are
read through the student's tokenizer."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import free_port

from app.teacher.client import TeacherClient, TeacherFailed


class _Tok:
    """A three-token tokenizer (what the client reads token names through)."""

    unk_token_id = 0
    vocab = {"<unk>": 0, "a": 1, "b": 2}

    def convert_tokens_to_ids(self, name):
        return self.vocab.get(name, 0)

    def __len__(self):
        return 3

    def decode(self, ids):
        return "".join({0: "?", 1: "a", 2: "b"}[i] for i in ids)


def _stub(reply, delay: float = 0.0):
    """A local OpenAI-shaped server answering every completion with ``reply(body)`` after ``delay`` s; (url, stop)."""
    asked = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            time.sleep(delay)
            self._send({"id": "x", "object": "text_completion", "created": 0, "model": "stub",
                        "choices": [{"index": i, "text": "", "finish_reason": "length", **reply(p)}
                                    for i, p in enumerate(body["prompt"])]})

    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/v1", srv, asked


def test_a_teacher_that_is_down_is_one_line():
    client = TeacherClient(f"http://127.0.0.1:{free_port()}/v1", _Tok(), retries=1, timeout=5)
    with pytest.raises(TeacherFailed) as e:
        client.tokenize(["ab"])
    assert "\n" not in str(e.value) and "not answering" in str(e.value) and e.value.exit_code == 1


def test_a_teacher_without_log_probabilities_is_one_line():
    url, srv, _ = _stub(lambda p: {"logprobs": None})
    try:
        with pytest.raises(TeacherFailed, match="returned no log-probabilities"):
            TeacherClient(url, _Tok(), retries=0).score([[1, 2, 1]], [1], 2)
    finally:
        srv.shutdown()


def test_a_slow_teacher_is_one_line_naming_the_timeout():
    url, srv, asked = _stub(lambda p: {"logprobs": None}, delay=3)
    try:
        client = TeacherClient(url, _Tok(), retries=1, timeout=0.5, model="stub")
        start = time.time()
        with pytest.raises(TeacherFailed, match=r"did not answer within 0.5 s \(distill.teacher_timeout\)"):
            client.score([[1, 2]], [1], 1)
        assert len(asked) == 2 and time.time() - start < 10  # one retry, then the line
    finally:
        srv.shutdown()


def test_token_names_that_are_not_ids_are_read_through_the_tokenizer():
    """A server that names tokens by their text (no return_tokens_as_token_ids): read as the student's ids."""
    def reply(prompt):
        return {"logprobs": {"tokens": ["a", "b", "a"], "token_logprobs": [None, -0.5, -0.1],
                             "top_logprobs": [None, {"b": -0.5, "a": -1.2}, {"a": -0.1, "b": -2.5}]}}

    url, srv, asked = _stub(reply)
    try:
        scored = TeacherClient(url, _Tok(), retries=0).score([[1, 2, 1]], [1], 2)[0]
    finally:
        srv.shutdown()
    assert scored.ids == [2, 1] and scored.lps == [-0.5, -0.1]
    assert scored.top_ids == [[2, 1], [1, 2]] and scored.top_lps == [[-0.5, -1.2], [-0.1, -2.5]]
    assert asked[0]["echo"] is True and asked[0]["logprobs"] == 2 and asked[0]["return_tokens_as_token_ids"]


def test_a_server_that_scores_other_tokens_is_another_vocabulary():
    def reply(prompt):
        return {"logprobs": {"tokens": ["token_id:1", "token_id:1"], "token_logprobs": [None, -0.3],
                             "top_logprobs": [None, {"token_id:1": -0.3}]}}

    url, srv, _ = _stub(reply)
    try:
        with pytest.raises(TeacherFailed, match="another vocabulary"):
            TeacherClient(url, _Tok(), retries=0).score([[1, 2]], [1], 1)
    finally:
        srv.shutdown()
