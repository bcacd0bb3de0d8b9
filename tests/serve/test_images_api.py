"""`serve` with pictures: OpenAI image content parts (a data URL) reach a run trained on images, plain and streamed,
with the official openai client; a remote image URL under --local-only, a path on the server's disk and a picture
sent to a text run are 400s naming the part, and the server stays up."""

import base64
import io

import pytest
from conftest import free_port

pytestmark = pytest.mark.slow



def _data_url(color) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (48, 48), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _serve(run, local_only=True):
    from app.serve.engine import Engine
    from app.serve.server import start_in_thread

    port = free_port()
    srv, thread = start_in_thread(Engine(run, local_only=local_only), "127.0.0.1", port, key="k")
    return f"http://127.0.0.1:{port}/v1", srv, thread


def _ask(url_part, text="What color is the square?"):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url_part}},
                                         {"type": "text", "text": text}]}]


def test_image_content_parts_are_read_by_a_run_trained_on_images(images_demo, tiny_models, tmp_path):
    import json

    import openai
    from fakes import make_adapter, write_run
    from openai import OpenAI
    from PIL import Image

    from app.data.shapes import COLORS
    from app.eval.chat import Chat
    from app.run import layout

    r, out = images_demo
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((out / layout.DEMO_IMAGES_JSON).read_text())["config"]["demo"]["run"]
    chat = Chat(run, local_only=True)  # what `chat RUN --image` answers: the greedy reply serve must give

    def chat_says(color):
        chat.reset()
        chat.set_images([Image.new("RGB", (48, 48), color)])
        return chat.reply("adapter", "What color is the square?", max_new_tokens=6)

    expected = {c: chat_says(COLORS[c]) for c in ("blue", "red")}
    assert set(expected.values()) <= set(COLORS)
    url, srv, thread = _serve(run)
    try:
        client = OpenAI(base_url=url, api_key="k", max_retries=0, timeout=120)
        name = client.models.list().data[0].id
        # greedy, as chat answers (the API's default temperature is 1: a sample, which may say another colour)
        reply = client.chat.completions.create(model=name, messages=_ask(_data_url(COLORS["blue"])), max_tokens=6,
                                               temperature=0)
        assert reply.choices[0].message.content == expected["blue"]
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model=name, messages=_ask(_data_url(COLORS["red"])), max_tokens=6, stream=True, temperature=0)
            if c.choices)
        assert streamed == expected["red"]
        with pytest.raises(openai.BadRequestError, match="not fetched by this server"):
            client.chat.completions.create(model=name, messages=_ask("https://example.org/cat.png"), max_tokens=4)
        with pytest.raises(openai.BadRequestError, match="not a readable image"):
            client.chat.completions.create(model=name, messages=_ask("data:image/png;base64,AAAA"), max_tokens=4)
        # a path is never read: a picture on the server's disk, a file that is no image, one that does not exist,
        # a relative path and a file: URL get the same 400, which says nothing of what is there
        Image.new("RGB", (48, 48), COLORS["blue"]).save(tmp_path / "blue.png")
        answers = set()
        for where in (str(tmp_path / "blue.png"), "/etc/passwd", str(tmp_path / "missing.png"), "blue.png",
                      f"file://{tmp_path / 'blue.png'}"):
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(model=name, messages=_ask(where), max_tokens=4)
            answers.add((refused.value.status_code, json.dumps(refused.value.body, sort_keys=True)))
        (status, body), = answers
        assert status == 400 and "this server reads no files" in body and "found" not in body and "readable" not in body
        assert client.chat.completions.create(model=name, messages=_ask(_data_url(COLORS["green"])),
                                              max_tokens=6, temperature=0).choices[0].message.content in COLORS
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
    text_run = write_run(tmp_path / "run", tiny_models["qwen3"], make_adapter(tiny_models["qwen3"], tmp_path / "a"))
    url, srv, thread = _serve(text_run)
    try:
        client = OpenAI(base_url=url, api_key="k", max_retries=0, timeout=120)
        name = client.models.list().data[0].id
        with pytest.raises(openai.BadRequestError, match="reads no images"):
            client.chat.completions.create(model=name, messages=_ask(_data_url(COLORS["blue"])), max_tokens=4)
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
