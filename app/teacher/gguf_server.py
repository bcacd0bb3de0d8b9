"""A GGUF teacher in a child process of its own: llama.cpp (llama-cpp-python) behind the part of OpenAI's
``/v1/completions`` a teacher is asked through (``client``), so the training process holds none of its weights and
a death inside llama.cpp (an illegal instruction, the kernel's out-of-memory killer, a corrupt file) ends this child,
never the run.

What it answers: prompts as text or token ids (one or several), ``echo`` with ``max_tokens`` 0 (a sequence scored:
each token's log-probability and its ``logprobs`` most likely alternatives, as vLLM and ``qlora-app serve`` answer
lm-eval), and greedy or sampled answers with the same per-token log-probabilities; ``return_tokens_as_token_ids``
(vLLM's extension) names each token by its id, so nothing is lost to two tokens spelled alike. One request at a time:
llama.cpp's context is not shared between threads.

The parent side is ``GgufTeacher``: it starts the child, reads its port once it has loaded the file, and says in one
line how it ended when it dies (app.export.llamacpp.death_line). Owns the child; must not train or plan.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from app.errors import UserError
from app.export.llamacpp import death_line, open_gguf

READY = "qlora-app teacher ready on port "
START_TIMEOUT_S = 600  # a 30B-A3B Q4_K_M file from a cold disk


class TeacherDied(UserError):
    """The teacher's llama.cpp child ended: one line naming the cause (the run stops at its last checkpoint)."""

    exit_code = 1


# ------------------------------------------------------------------------------------------------ the child side
class _Model:
    """The loaded GGUF and what a request asks of it."""

    def __init__(self, llm, name: str):
        import llama_cpp

        self.llm, self.name = llm, name
        self.vocab = llm._model.vocab
        self._eog = lambda t: bool(llama_cpp.llama_vocab_is_eog(self.vocab, t))

    def ids(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            return self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
        return [int(t) for t in prompt]

    def _rows(self, ids: list[int]):
        """log-softmax of the logits after each of ``ids`` (row j: the distribution of token j + 1)."""
        import numpy as np

        self.llm.reset()
        self.llm.eval(ids)
        logits = np.asarray(self.llm.scores[: len(ids)], dtype=np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    @staticmethod
    def _top(row, k: int) -> list[tuple[int, float]]:
        import numpy as np

        if k <= 0:
            return []
        k = min(k, row.shape[0])
        idx = np.argpartition(-row, k - 1)[:k]
        idx = idx[np.argsort(-row[idx], kind="stable")]
        return [(int(i), float(row[i])) for i in idx]

    def complete(self, prompt, echo: bool, top: int | None, max_tokens: int, temperature: float, seed: int):
        """(tokens, log-probabilities, alternatives, finish) of one prompt: the echoed prompt's (its first token has
        no context: None) followed by the answer's."""
        import numpy as np

        ids = self.ids(prompt)
        n_ctx = self.llm.n_ctx()
        if len(ids) + max_tokens > n_ctx:
            raise ValueError(f"the prompt's {len(ids)} tokens and {max_tokens} to answer exceed the teacher's context "
                             f"of {n_ctx} (distill.teacher_context)")
        if not ids:
            raise ValueError("an empty prompt")
        rows = self._rows(ids)
        tokens, lps, alts = ([], [], [])
        if echo:
            tokens = list(ids)
            lps = [None] + [float(rows[j - 1][ids[j]]) for j in range(1, len(ids))]
            alts = [None] + [self._top(rows[j - 1], top or 0) for j in range(1, len(ids))]
        rng = np.random.default_rng(seed)
        row, finish = rows[len(ids) - 1], "length"
        for _ in range(max_tokens):
            if temperature > 0:
                p = np.exp(row / temperature - (row / temperature).max())
                nxt = int(rng.choice(len(p), p=p / p.sum()))
            else:
                nxt = int(np.argmax(row))
            if self._eog(nxt):
                finish = "stop"
                break
            tokens.append(nxt)
            lps.append(float(row[nxt]))
            alts.append(self._top(row, top or 0))
            self.llm.eval([nxt])
            last = np.asarray(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float64)
            last -= last.max()
            row = last - math.log(float(np.exp(last).sum()))
        return ids, tokens, lps, alts, finish


def _name(model: _Model, token: int, as_ids: bool) -> str:
    if as_ids:
        return f"token_id:{token}"
    return model.llm.detokenize([token]).decode("utf-8", errors="replace")


def _choice(model: _Model, index: int, prompt, body: dict) -> tuple[dict, int, int]:
    echo = bool(body.get("echo"))
    top = body.get("logprobs")
    max_tokens = int(body.get("max_tokens", 16) if body.get("max_tokens") is not None else 16)
    temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
    ids, tokens, lps, alts, finish = model.complete(prompt, echo, top, max_tokens, temperature,
                                                     int(body.get("seed") or 0))
    answer = tokens[len(ids):] if echo else tokens
    text = model.llm.detokenize(tokens).decode("utf-8", errors="replace")
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    logprobs = None
    if top is not None:
        logprobs = {"tokens": [_name(model, t, as_ids) for t in tokens], "token_logprobs": lps,
                    "top_logprobs": [None if a is None else {_name(model, t, as_ids): v for t, v in a}
                                     for a in alts]}
    return ({"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}, len(ids), len(answer))


def _prompts(body: dict) -> list:
    p = body.get("prompt")
    if isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(t, int) for t in p)):
        return [p]
    if isinstance(p, list) and p:
        return p
    raise ValueError("prompt: a text, token ids, or a list of either")


def _handler(model: _Model):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: the parent's terminal is the run's
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": model.name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no such path {self.path}"}})

        def do_POST(self):  # noqa: N802 - http.server's name
            if self.path.rstrip("/") not in ("/v1/completions", "/completions"):
                self._send(404, {"error": {"message": f"no such path {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                choices, used = [], [0, 0]
                for i, prompt in enumerate(_prompts(body)):
                    choice, asked, answered = _choice(model, i, prompt, body)
                    choices.append(choice)
                    used[0], used[1] = used[0] + asked, used[1] + answered
            except (ValueError, TypeError, KeyError) as e:
                self._send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
                return
            self._send(200, {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "model": model.name,
                             "created": int(time.time()), "choices": choices,
                             "usage": {"prompt_tokens": used[0], "completion_tokens": used[1],
                                       "total_tokens": sum(used)}})

    return Handler


def main(argv: list[str] | None = None) -> None:
    """The child: load the file (the way llama.cpp runs on this CPU: app.export.llamacpp.open_gguf), then serve on
    127.0.0.1 until the parent ends it; the port is said on stdout once the file is loaded."""
    a = argparse.ArgumentParser()
    a.add_argument("--model", required=True)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--context", type=int, default=4096)
    a.add_argument("--gpu-layers", type=int, default=0)
    a.add_argument("--port", type=int, default=0)
    args = a.parse_args(argv)
    llm = open_gguf(Path(args.model), n_ctx=args.context, n_threads=args.threads, n_threads_batch=args.threads,
                    n_gpu_layers=args.gpu_layers, logits_all=True, n_batch=min(512, args.context))
    server = HTTPServer(("127.0.0.1", args.port), _handler(_Model(llm, Path(args.model).name)))
    print(READY + str(server.server_address[1]), flush=True)
    server.serve_forever()


# ----------------------------------------------------------------------------------------------- the parent side
@dataclass
class GgufSettings:
    """How the child runs the file: CPU threads, context (tokens), layers offloaded to the GPU."""

    threads: int
    context: int
    gpu_layers: int = 0


class GgufTeacher:
    """A GGUF file served by llama.cpp in a child process (started by ``start``, ended by ``close``); ``url`` its
    OpenAI-compatible address; ``died()`` how it ended, one line, while it is not running."""

    def __init__(self, path: Path, settings: GgufSettings, log_file: Path | None = None):
        self.path, self.settings, self.log_file = Path(path), settings, log_file
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._err = None

    def start(self, timeout: float = START_TIMEOUT_S) -> "GgufTeacher":
        import tempfile

        s = self.settings
        self._err = open(self.log_file, "a+b") if self.log_file else tempfile.TemporaryFile()  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this checkout's app
        self.proc = subprocess.Popen([sys.executable, "-m", "app.teacher.gguf_server", "--model", str(self.path),
                                      "--threads", str(s.threads), "--context", str(s.context),
                                      "--gpu-layers", str(s.gpu_layers)],
                                     stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL, env=env,
                                     preexec_fn=_die_with_parent)
        line = _read_line(self.proc, timeout)
        if not line.startswith(READY):
            why = self.died(waited=True, what="loading the file") or f"it did not start within {timeout:g} s"
            self.close()
            raise TeacherDied(f"the teacher {self.path.name}: {why}")
        self.url = f"http://127.0.0.1:{int(line[len(READY):])}/v1"
        return self

    def died(self, waited: bool = False, what: str = "serving the teacher") -> str | None:
        """How the child ended (None while it runs): llama.cpp's own last line where it said one (a corrupt file),
        else the signal or exit code in words."""
        if self.proc is None:
            return None
        if waited:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                return None
        code = self.proc.poll()
        if code is None:
            return None
        said = _last_words(self._err)
        line = death_line(code, what)
        return f"{line}: {said}" if said and code >= 0 else line

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if self._err is not None:
            self._err.close()
            self._err = None

    def __enter__(self) -> "GgufTeacher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _die_with_parent() -> None:
    """In the child before it runs (Linux): it ends when the training process does, even on kill -9, so no teacher
    is left holding the machine's memory."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The child's first stdout line (its port), or "" when it ended or the time ran out first."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if sel.select(timeout=min(1.0, max(0.0, end - time.monotonic()))):
                return proc.stdout.readline().decode(errors="replace").strip()
            if proc.poll() is not None:
                return ""
        return ""
    finally:
        sel.close()


def _last_words(err) -> str:
    """The last meaningful line the child wrote to stderr (a Python error's own line, llama.cpp's refusal)."""
    if err is None:
        return ""
    try:
        err.flush()
        err.seek(0)
        lines = [x.strip() for x in err.read().decode(errors="replace").splitlines() if x.strip()]
    except (OSError, ValueError):
        return ""
    errors = [x for x in lines if "Error" in x or "error" in x or "failed" in x]
    return (errors or lines or [""])[-1][:300]


if __name__ == "__main__":
    main()
