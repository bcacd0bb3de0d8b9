"""`serve` returns log-probabilities: chat's logprobs / top_logprobs and completions' logprobs with echo (a prompt
as text or token ids, several prompts as several choices) equal the model's own, read here by an independent forward
pass; and lm-evaluation-harness's own local-completions client runs a multiple-choice task against the server with
the loglikelihoods its in-process HFLM gets from the same model."""

import json

import pytest
from conftest import free_port

pytestmark = pytest.mark.slow
PROMPT = "What is 3 + 4?"



def _client(url):
    from openai import OpenAI

    return OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory):
    """(base URL, engine) of a server on a run around a random adapter on the tiny Qwen3 (no key: lm-eval's client
    is the one a user points at a local server)."""
    from fakes import make_adapter, write_run

    from app.serve.engine import Engine
    from app.serve.server import start_in_thread

    root = tmp_path_factory.mktemp("serve-logprobs")
    run = write_run(root / "run", tiny_models["qwen3"], make_adapter(tiny_models["qwen3"], root / "a"))
    engine = Engine(run)
    port = free_port()
    srv, thread = start_in_thread(engine, "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}/v1", engine
    srv.should_exit = True
    thread.join(timeout=10)


def _own(engine, side: str, ids: list[int], top: int = 0):
    """log p(ids[j] | ids[:j]) for j >= 1, by the model itself (not through the server's code); with ``top``, also
    each position's ``top`` highest log-probabilities."""
    import torch

    with engine.pair.side(side), torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([ids])).logits[0].float()
    logps = torch.log_softmax(logits, -1)
    chosen = [float(logps[j - 1, ids[j]]) for j in range(1, len(ids))]
    if not top:
        return chosen
    return chosen, [torch.topk(logps[j - 1], top).values.tolist() for j in range(1, len(ids))]


def test_chat_logprobs_are_the_models_own_with_their_alternatives(served):
    url, engine = served
    client = _client(url)
    msgs = [{"role": "user", "content": PROMPT}]
    said = {}
    for name, side in (("run", "adapter"), ("run-base", "base")):
        r = client.chat.completions.create(model=name, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                           top_logprobs=3)
        content = r.choices[0].logprobs.content
        said[name] = r.choices[0].message.content
        # one entry per reply token (a random adapter's reply may hold pieces of multi-byte characters, so the
        # pieces are not compared with the text here: the echo test does that on plain words)
        assert len(content) == r.usage.completion_tokens
        prompt = engine.ids(engine.chat_prompt(msgs), 0)
        reply = engine.reply(name, engine.chat_prompt(msgs), 8, 0.0).ids  # the same greedy reply's tokens
        assert [engine.tok.decode([t]) for t in reply] == [t.token for t in content]
        own, best = _own(engine, side, prompt + reply, top=3)
        assert [t.logprob for t in content] == pytest.approx(own[len(prompt) - 1:], abs=1e-4)
        for t, b in zip(content, best[len(prompt) - 1:]):  # each position's 3 likeliest, most likely first
            assert [a.logprob for a in t.top_logprobs] == pytest.approx(b, abs=1e-4)
    plain = client.chat.completions.create(model="run", messages=msgs, max_tokens=8, temperature=0)
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == said["run"]  # asked for none


def test_completion_echo_scores_the_prompt_as_text_or_token_ids(served):
    url, engine = served
    client = _client(url)
    text = "The cat sat on the mat because"
    ids = engine.tok(text, add_special_tokens=False)["input_ids"]
    r = client.completions.create(model="run", prompt=[text, ids], max_tokens=0, echo=True, logprobs=2,
                                  temperature=0)
    assert [c.index for c in r.choices] == [0, 1] and r.usage.completion_tokens == 0
    own = _own(engine, "adapter", ids)
    for c in r.choices:
        lp = c.logprobs
        assert c.text == text and "".join(lp.tokens) == text and lp.text_offset[0] == 0
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # the first token has no context
        assert lp.token_logprobs[1:] == pytest.approx(own, abs=1e-4)
        assert all(len(top) <= 2 and max(top.values()) >= v - 1e-6
                   for top, v in zip(lp.top_logprobs[1:], lp.token_logprobs[1:]))
    # a reply with its own tokens scored (no echo): the reply's tokens only, after the prompt
    r = client.completions.create(model="run", prompt=text, max_tokens=5, logprobs=1, temperature=0)
    reply = engine.reply("run", text, 5, 0.0).ids
    assert len(r.choices[0].logprobs.tokens) == len(reply) == r.usage.completion_tokens
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(_own(engine, "adapter", ids + reply)[len(ids) - 1:],
                                                                 abs=1e-4)


def test_logprob_requests_it_cannot_serve_are_refused_by_name(served):
    import openai

    url, engine = served
    client = _client(url)
    msgs = [{"role": "user", "content": PROMPT}]
    for make, field in ((lambda: client.chat.completions.create(model="run", messages=msgs, max_tokens=2,
                                                                 logprobs=True, stream=True), "logprobs"),
                        (lambda: client.chat.completions.create(model="run", messages=msgs, max_tokens=2,
                                                                 top_logprobs=2), "top_logprobs"),
                        (lambda: client.chat.completions.create(model="run", messages=msgs, max_tokens=2,
                                                                 logprobs=True, top_logprobs=50), "top_logprobs"),
                        (lambda: client.completions.create(model="run", prompt="hi", max_tokens=2, logprobs=99),
                         "logprobs"),
                        (lambda: client.completions.create(model="run", prompt=[10 ** 9], max_tokens=2), "prompt"),
                        (lambda: client.completions.create(model="run", prompt="hi", max_tokens=0), "max_tokens")):
        with pytest.raises(openai.BadRequestError) as e:
            make()
        assert e.value.body["param"] in (field, None) and e.value.status_code == 400, e.value.body
    assert "vocabulary" in str(pytest.raises(openai.BadRequestError, client.completions.create, model="run",
                                             prompt=[10 ** 9], max_tokens=2).value)


def test_lm_evals_own_client_runs_a_multiple_choice_task_against_serve(served, tiny_models, tmp_path):
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    url, engine = served
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"q": f"{a} plus {b} is", "choices": [
        str(a + b), str(a + b + 1), str(a * b)], "gold": 0}) + "\n" for a, b in ((2, 3), (4, 1), (5, 5), (1, 7))))
    (tmp_path / "sums_mc.yaml").write_text(
        "task: sums_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: " + str(tmp_path / "rows.jsonl")
        + "\noutput_type: multiple_choice\ntest_split: test\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{choices}}'\n"
        "doc_to_target: gold\nmetric_list:\n  - metric: acc\n")
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(tmp_path), include_defaults=False)
    served_lm = lm_eval.simple_evaluate(
        model="local-completions", tasks=["sums_mc"], task_manager=tm, log_samples=True,
        model_args={"base_url": f"{url}/completions", "model": "run", "tokenizer": str(tiny_models["qwen3"]),
                    "tokenizer_backend": "huggingface", "tokenized_requests": True, "max_retries": 1,
                    "num_concurrent": 1})
    with engine.pair.side("adapter"):
        local = lm_eval.simple_evaluate(model=HFLM(pretrained=engine.model, tokenizer=engine.tok, batch_size=1),
                                        tasks=["sums_mc"], task_manager=tm, log_samples=True)
    resps = lambda res: [r[0][0] for s in sorted(res["samples"]["sums_mc"], key=lambda s: s["doc_id"])  # noqa: E731
                         for r in s["resps"]]
    assert len(resps(served_lm)) == 12  # 4 rows x 3 choices, each a loglikelihood request the server scored
    assert resps(served_lm) == pytest.approx(resps(local), abs=1e-3)
    assert served_lm["results"]["sums_mc"]["acc,none"] == local["results"]["sums_mc"]["acc,none"]


def test_tokens_come_back_as_ids_when_asked_and_a_teacher_client_reads_them(served):
    """vLLM's return_tokens_as_token_ids: each token and alternative named ``token_id:N``; the distillation
    teacher's client (app/teacher/client.py) reads the server's scores of an answer as the model's own."""
    from app.teacher.client import TeacherClient

    url, engine = served
    ids = engine.tok("The answer is 7.", add_special_tokens=False)["input_ids"]
    r = _client(url).completions.create(model="run", prompt=ids, echo=True, max_tokens=0, logprobs=3,
                                        extra_body={"return_tokens_as_token_ids": True})
    lp = r.choices[0].logprobs
    assert lp.tokens == [f"token_id:{t}" for t in ids]
    assert all(k.startswith("token_id:") for alts in lp.top_logprobs[1:] for k in alts)
    scored = TeacherClient(url, engine.tok, model="run").score([ids], [2], 3)[0]
    assert scored.ids == ids[2:]
    own, tops = _own(engine, "adapter", ids, top=3)
    assert scored.lps == pytest.approx(own[1:], abs=1e-4)
    assert [v for v in scored.top_lps[0][:3]] == pytest.approx(tops[1], abs=1e-4)
