"""`qlora-app serve RUN`: the official openai client and curl against a real server on a run's adapter and its base
(plain, streamed, concurrent, malformed, a client that goes away mid-stream, the key beyond loopback), greedy
replies equal to `compare`'s."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest
from conftest import cli, free_port
from repo_paths import ROOT

pytestmark = pytest.mark.slow
PROMPT = "What is 3 + 4?"



@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory):
    """(base URL, engine, run) of a server on a run around a random adapter on the tiny Qwen3, with a key."""
    from fakes import make_adapter, write_run

    from app.serve.engine import Engine
    from app.serve.server import start_in_thread

    root = tmp_path_factory.mktemp("serve")
    run = write_run(root / "run", tiny_models["qwen3"], make_adapter(tiny_models["qwen3"], root / "a"))
    engine = Engine(run)
    port = free_port()
    srv, thread = start_in_thread(engine, "127.0.0.1", port, key="s3cret")
    yield f"http://127.0.0.1:{port}/v1", engine, run
    srv.should_exit = True
    thread.join(timeout=10)


def _client(url, key="s3cret"):
    from openai import OpenAI

    return OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)


def test_the_openai_client_gets_compares_greedy_answers_plain_and_streamed(served):
    from app.eval.compare import run_comparison

    url, engine, run = served
    client = _client(url)
    names = [m.id for m in client.models.list()]
    assert names == ["run", "run-base"]
    cmp = run_comparison(run, prompts=(PROMPT,), max_new_tokens=24, temperature=0.0, batch_size=1, record=None)
    row = cmp.rows[0]
    for model, side in (("run", row.adapter), ("run-base", row.base)):
        out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                             max_tokens=24, temperature=0)
        assert out.choices[0].message.content == side.text  # the same path as compare (and chat)
        assert out.usage.completion_tokens > 0 and out.choices[0].finish_reason in ("stop", "length")
        streamed = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                                  max_tokens=24, temperature=0, stream=True)
        chunks = list(streamed)
        pieces = [c.choices[0].delta.content or "" for c in chunks]
        assert "".join(pieces) == side.text and chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices[0].finish_reason in ("stop", "length") and any(pieces)
    text = client.completions.create(model="run", prompt="Tom has 3 apples", max_tokens=8, temperature=0)
    assert text.choices[0].text and text.object == "text_completion"


def test_concurrent_requests_are_queued_and_all_answered(served):
    url, engine, _ = served
    client, out, errors = _client(url), [], []

    def ask(i):
        try:
            r = client.chat.completions.create(model="run", messages=[{"role": "user", "content": PROMPT}],
                                               max_tokens=16, temperature=0)
            out.append(r.choices[0].message.content)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    before = engine.stats.requests
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(out) == 6 and len(set(out)) == 1  # one at a time, each the same greedy answer
    assert engine.stats.requests - before == 6


def test_bad_requests_get_openai_errors_and_the_server_stays_up(served):
    import httpx
    import openai

    url, _, _ = served
    client = _client(url)
    with pytest.raises(openai.BadRequestError, match="role must be one of"):
        client.chat.completions.create(model="run", messages=[{"role": "robot", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="is not served here"):
        client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens must be between"):
        client.chat.completions.create(model="run", messages=[{"role": "user", "content": "hi"}], max_tokens=0)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model="run", prompt="word " * 5000, max_tokens=4)
    r = httpx.post(f"{url}/chat/completions", content=b"{not json", headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 400 and r.json()["error"]["message"] == "the request body is not JSON"
    r = httpx.get(f"{url}/nowhere", headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 404 and "error" in r.json()
    with pytest.raises(openai.AuthenticationError):
        _client(url, key="wrong").models.list()
    assert client.models.list().data  # still serving


def test_a_client_that_goes_away_mid_stream_frees_the_model(served):
    import httpx

    url, engine, _ = served
    stopped = engine.stats.stopped
    body = {"model": "run", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 400, "temperature": 1,
            "stream": True}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, headers={"Authorization": "Bearer s3cret"},
                      timeout=60) as r:
        first = next(r.iter_lines())
        assert first.startswith("data: ")
    deadline = time.time() + 30
    while engine.stats.stopped == stopped and time.time() < deadline:
        time.sleep(0.1)
    assert engine.stats.stopped == stopped + 1  # the reply ended early, at its next token
    ok = _client(url).chat.completions.create(model="run", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert ok.choices[0].message is not None


def test_curl_plain_and_streamed(served):
    url, _, _ = served
    head = ["-s", "-H", "Authorization: Bearer s3cret", "-H", "Content-Type: application/json"]
    body = json.dumps({"model": "run-base", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8,
                       "temperature": 0})
    out = subprocess.run(["curl", *head, "-d", body, f"{url}/chat/completions"], capture_output=True, text=True,
                         timeout=60)
    assert json.loads(out.stdout)["choices"][0]["message"]["role"] == "assistant"
    stream_body = body.replace('"temperature"', '"stream": true, "temperature"')
    streamed = subprocess.run(["curl", "-N", *head, "-d", stream_body, f"{url}/chat/completions"],
                              capture_output=True, text=True, timeout=60)
    assert streamed.stdout.rstrip().endswith("data: [DONE]") and "chat.completion.chunk" in streamed.stdout


def test_beyond_loopback_a_key_is_required_and_the_start_line_says_how_to_connect(served, tmp_path):
    from app.serve.server import banner

    _, engine, run = served
    env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "QLORA_APP_API_KEY": None}  # no key in its environment
    r = cli("serve", str(run), "--host", "0.0.0.0", timeout=60, env=env)
    assert r.returncode == 2 and "add --api-key KEY" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    line = banner(engine, "127.0.0.1", 8000, None)
    assert "http://127.0.0.1:8000/v1" in line and "this machine only" in line
    assert 'client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none")' in line
    assert 'model="run"' in line and "run-base" in line


def test_a_request_without_max_tokens_gets_what_the_context_leaves(served):
    """The default reply length fits the model's context: a long prompt on a 512-token model with no max_tokens is
    answered (within the context), not refused; an explicit max_tokens that does not fit is still a 400."""
    import openai

    url, engine, _ = served
    client = _client(url)
    long = "Count the apples, pears and plums in the basket. " * 12
    used = len(engine.ids(engine.chat_prompt([{"role": "user", "content": long}]), 1))
    assert engine.context - used < 256  # the old default (256 tokens) would not fit beside it
    out = client.chat.completions.create(model="run", messages=[{"role": "user", "content": long}], temperature=0)
    assert out.usage.prompt_tokens == used and out.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError, match="more than the model's 512-token context"):
        client.chat.completions.create(model="run", messages=[{"role": "user", "content": long}], max_tokens=256)


def test_a_busy_port_is_one_line_before_the_model_loads(served):
    _, _, run = served
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        t0 = time.monotonic()
        r = cli("serve", str(run), "--port", str(port), timeout=60, env=env)
    err = r.stderr.strip()
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err, err
    assert len(err.splitlines()) == 1 and "serving" not in r.stdout and "Traceback" not in err
    assert time.monotonic() - t0 < 30  # no model was loaded


def test_stop_strings_end_a_reply_plain_and_streamed_chat_and_completions(served):
    """`stop` used to be ignored: the reply ends before the first stop string met, finish_reason "stop", the same
    text whole or streamed, on both routes."""
    url, _, _ = served
    client = _client(url)
    msgs = [{"role": "user", "content": PROMPT}]
    full = client.chat.completions.create(model="run", messages=msgs, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    stop = next(text[i:i + 2] for i in range(len(text) // 3, len(text) - 2) if text[i:i + 2].strip())
    want = text[:text.find(stop)]
    out = client.chat.completions.create(model="run", messages=msgs, max_tokens=24, temperature=0, stop=[stop, "@@"])
    assert out.choices[0].message.content == want and out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens < full.usage.completion_tokens
    streamed = list(client.chat.completions.create(model="run", messages=msgs, max_tokens=24, temperature=0,
                                                   stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == want
    assert streamed[-1].choices[0].finish_reason == "stop"
    plain = client.completions.create(model="run", prompt="Tom has 3 apples", max_tokens=16, temperature=0).choices[0]
    cut = plain.text[len(plain.text) // 2:][:2]
    if cut.strip():
        again = client.completions.create(model="run", prompt="Tom has 3 apples", max_tokens=16, temperature=0,
                                          stop=cut)
        assert again.choices[0].text == plain.text[:plain.text.find(cut)]


def test_fields_are_honoured_or_refused_by_name_never_dropped(served):
    import openai

    url, _, _ = served
    client = _client(url)
    msgs = [{"role": "user", "content": PROMPT}]
    for kwargs, field in (({"response_format": {"type": "json_object"}}, "response_format"),
                          ({"logprobs": True, "stream": True}, "logprobs"), ({"top_p": 0.5}, "top_p"),
                          ({"presence_penalty": 1.0}, "presence_penalty"), ({"extra_body": {"min_p": 0.1}}, "min_p"),
                          ({"stream_options": {"include_usage": True}}, "stream_options"),
                          ({"tool_choice": "required"}, "tool_choice")):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="run", messages=msgs, max_tokens=4, **kwargs)
        assert e.value.body["param"] == field and field in e.value.body["message"], e.value.body
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client.completions.create(model="run", prompt="hi", max_tokens=2, best_of=2)
    # at the value that asks for nothing, they are fine; include_usage is honoured
    ok = client.chat.completions.create(model="run", messages=msgs, max_tokens=4, top_p=1,
                                        response_format={"type": "text"}, user="me", temperature=0)
    assert ok.choices[0].message.content is not None
    chunks = list(client.chat.completions.create(model="run", messages=msgs, max_tokens=4, stream=True,
                                                 stream_options={"include_usage": True}, temperature=0))
    assert chunks[-1].usage.completion_tokens == ok.usage.completion_tokens and chunks[-1].choices == []
