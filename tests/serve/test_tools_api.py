"""`qlora-app serve` on a tools run, as an agent: the official openai client sends the run's tools, gets the model's
calls back as ``tool_calls`` (TRL's parser, as training reads them), answers them with ``tool`` messages and gets
the final answer: greedy, the same calls and the same answer as `chat` gives with the run's own tools."""

import json

import pytest
from conftest import free_port

pytestmark = pytest.mark.slow
QUESTION = "Mia has 47 stickers and gets 38 more. How many stickers does Mia have now?"


@pytest.fixture(scope="module")
def tools_run(tmp_path_factory):
    """The tools demo's run (presets/demo-tools.yaml on the shipped tool-calling base), trained 2 steps."""
    from app.config.build import build_config
    from app.demo.recipe import tools_preset
    from app.train.running.session import Session

    out = tmp_path_factory.mktemp("tools")
    cfg = build_config({**tools_preset(), "output_dir": str(out), "run_name": "calc"},
                       sets=["max_steps=2", "per_device_train_batch_size=8", "num_generations=4",
                             "training.eval_every=0", "training.proof_rows=0", "save_steps=1000"])
    return Session(cfg, progress=False).run()


@pytest.fixture(scope="module")
def served(tools_run):
    from app.serve.engine import Engine
    from app.serve.server import start_in_thread

    engine = Engine(tools_run)
    port = free_port()
    srv, thread = start_in_thread(engine, "127.0.0.1", port, key=None)
    yield f"http://127.0.0.1:{port}/v1", engine
    srv.should_exit = True
    thread.join(timeout=10)


def test_a_tool_call_round_trip_equals_chat_with_the_same_tools(served, tools_run):
    from openai import OpenAI
    from transformers.utils import get_json_schema

    from app.eval.chat import Chat

    url, _ = served
    chat = Chat(tools_run, local_only=True)
    schemas = [get_json_schema(f) for f in chat.tools("adapter")]  # what the template renders from the run's tools
    client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    for side, model in (("adapter", "calc"), ("base", "calc-base")):
        want = chat.reply(side, QUESTION, max_new_tokens=64)
        turns = chat.last_turns[side]
        assert turns[0].get("tool_calls"), turns  # the shipped base calls its calculator
        msgs = [{"role": "user", "content": QUESTION}]
        first = client.chat.completions.create(model=model, messages=msgs, tools=schemas, max_tokens=64,
                                               temperature=0)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
        call = choice.message.tool_calls[0]
        asked = turns[0]["tool_calls"][0]["function"]
        assert call.function.name == asked["name"] and json.loads(call.function.arguments) == asked["arguments"]
        msgs += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": turns[1]["content"]}]
        final = client.chat.completions.create(model=model, messages=msgs, tools=schemas,
                                               max_tokens=64 - first.usage.completion_tokens, temperature=0)
        assert final.choices[0].message.content == want, (side, final.choices[0].message.content, want)
        assert final.choices[0].finish_reason == "stop"
        chat.reset()
    # without tools the request renders none: a different prompt, counted
    bare = client.chat.completions.create(model="calc", messages=[{"role": "user", "content": QUESTION}],
                                          max_tokens=4, temperature=0)
    assert bare.usage.prompt_tokens < first.usage.prompt_tokens


def test_tool_calls_stream_and_bad_tool_messages_are_400(served):
    import openai
    from openai import OpenAI

    url, _ = served
    client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    schema = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
                                               "parameters": {"type": "object", "properties": {
                                                   "expression": {"type": "string"}}, "required": ["expression"]}}}
    chunks = list(client.chat.completions.create(model="calc-base", messages=[{"role": "user", "content": QUESTION}],
                                                 tools=[schema], max_tokens=64, temperature=0, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls and calls[0].function.name == "calculator" and chunks[-1].choices[0].finish_reason == "tool_calls"
    with pytest.raises(openai.BadRequestError, match="tool_call_id"):
        client.chat.completions.create(model="calc", messages=[
            {"role": "user", "content": QUESTION}, {"role": "tool", "tool_call_id": "nope", "content": "85"}],
            max_tokens=4)
