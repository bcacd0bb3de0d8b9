"""chat: a greedy reply is compare's answer for the same held-out prompt, the base side is the adapter switched off
(one model), histories, the context limit, Stop, and the CLI's one-shot / --json / interactive modes."""

import json
import threading

import pytest
from conftest import cli

from app.errors import UserError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tiny_models, tmp_path_factory):
    from fakes import make_adapter, write_run

    root = tmp_path_factory.mktemp("chat")
    rows = [{"question": f"Tom has {a} apples and buys {b} more. How many apples?", "answer": str(a + b)}
            for a in range(10) for b in range(4)]
    data = root / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return write_run(root / "run", tiny_models["qwen3"], make_adapter(tiny_models["qwen3"], root / "a"), data)


@pytest.fixture(scope="module")
def session(run):
    from app.eval.chat import Chat

    return Chat(run, local_only=True)


def test_greedy_replies_equal_compare_on_heldout_prompts(run, session):
    from peft import PeftModel

    from app.eval.compare import run_comparison

    # batch size 1: the same batch shape as chat's, so equal on every device (app/model/generation.py says when a
    # batched compare may differ: bf16 / fp16 kernels on a GPU; on a CPU in fp32 it does not)
    result = run_comparison(run, num_samples=4, max_new_tokens=12, batch_size=1, local_only=True, record=False)
    assert all(r.source == "heldout" for r in result.rows)
    differs = 0
    for row in result.rows:
        for side in ("adapter", "base"):
            session.reset()  # compare asks each prompt fresh
            assert session.reply(side, row.prompt, max_new_tokens=12) == getattr(row, side).text, (side, row.prompt)
        differs += row.adapter.text != row.base.text
    assert differs  # the random adapter changes answers: the base side really has it off
    assert isinstance(session.model, PeftModel)  # one model; the base is the adapter disabled
    assert session.system == "Solve the problem step by step, briefly. End with a line of the form " \
                             "'Final answer: <answer>'."


def test_history_stop_and_context(session):
    session.reset()
    first = session.reply("adapter", "What is 2 + 2?", max_new_tokens=6)
    assert session.history["adapter"] == [{"role": "user", "content": "What is 2 + 2?"},
                                          {"role": "assistant", "content": first}]
    assert session.history["base"] == []  # each side keeps its own conversation
    assert "What is 2 + 2?" in session.prompt("adapter", "and 3 + 3?")
    # Stop: set from the stream, the reply ends after the piece in flight
    stop = threading.Event()
    pieces = []

    def on_text(p):
        pieces.append(p)
        stop.set()

    session.reset()
    stopped = session.reply("adapter", "Write a long story.", temperature=1.0, max_new_tokens=60, stop=stop,
                            on_text=on_text)
    full = session.reply("adapter", "Write a long story.", temperature=1.0, max_new_tokens=60)
    assert len(session.tok(stopped)["input_ids"]) < len(session.tok(full)["input_ids"])
    # a message that alone outgrows the context: one line; older turns are dropped to make room instead
    with pytest.raises(UserError, match=r"more than the model's 512-token context; shorten it"):
        session.reply("adapter", "apples " * 600, max_new_tokens=8)
    session.reset()
    session.reply("adapter", "apples " * 200, max_new_tokens=4)
    before = session.dropped
    session.reply("adapter", "apples " * 200, max_new_tokens=4)
    session.reply("adapter", "apples " * 200, max_new_tokens=4)
    assert session.dropped > before and len(session.history["adapter"]) < 6


def _cli(*args, stdin=None):
    return cli("chat", *args, stdin=stdin, timeout=300)


def test_cli_one_shot_json_and_conversation(run, session):
    session.reset()
    want_a = session.reply("adapter", "What is 3 + 4?", max_new_tokens=10)
    session.reset()
    want_b = session.reply("base", "What is 3 + 4?", max_new_tokens=10)
    r = _cli(str(run), "--message", "What is 3 + 4?", "--both", "--json", "--max-new-tokens", "10", "--local-only")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"adapter": want_a, "base": want_b}
    r = _cli(str(run), "-m", "What is 3 + 4?", "--base", "--max-new-tokens", "10", "--local-only")
    assert r.returncode == 0 and r.stdout.strip().endswith(want_b), r.stdout
    # interactive: /base switches sides, /system restarts, /exit leaves; streamed replies are printed
    r = _cli(str(run), "--max-new-tokens", "10", "--local-only",
             stdin="What is 3 + 4?\n/base\nWhat is 3 + 4?\n/system Be brief.\n/system\n/help\n/nope\n"
                   "/system none\n/exit\n")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"adapter> {want_a}" in r.stdout and f"base> {want_b}" in r.stdout
    assert "system prompt: Be brief.; conversation restarted" in r.stdout and "unknown command /nope" in r.stdout
    out = " ".join(r.stdout.split())
    assert "system prompt: Be brief. (/system TEXT sets it" in out  # a bare /system shows it, clears nothing
    assert out.count("commands: /adapter") >= 3  # at the start, for /help, and with the unknown command
    assert "system prompt: (none); conversation restarted" in out
    r = _cli(str(run), "-m", "apples " * 600, "--local-only")
    assert r.returncode == 2 and "context" in r.stderr and "Traceback" not in r.stderr
