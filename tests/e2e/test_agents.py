"""GRPO with tools and environments, end to end on tiny 4-bit models: the chat templates TRL knows, the tool loop
of chat / compare / the proof, a hung, raising and flooding tool during a real run, an environment that owns a
reward, and bad tool files or templates refused in one line before any model loads."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import cli, cli as _cli
from conftest import cli_here

from app.config.build import build_config
from app.config.builtin import TOOLS_MODEL, shipped_dir
from app.demo.build_tools_base import TOOLS_SYSTEM_PROMPT
from app.run import layout, store

TOOL_BASE = shipped_dir(TOOLS_MODEL)


def _tiny_with_template(tiny_models, arch: str, template: str | None, tmp_path, context: int | None = None) -> Path:
    """A copy of a tiny fixture model whose tokenizer carries one of TRL's shipped templates (and a longer context:
    the fixture's 400-token vocabulary spells a tool schema out in hundreds of tokens)."""
    import shutil

    from transformers import AutoTokenizer

    from app.model.templates import apply_named_template

    out = tmp_path / f"{arch}-{template}"
    shutil.copytree(tiny_models[arch], out)
    if context:
        config = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**config, "max_position_embeddings": context}))
    tok = apply_named_template(AutoTokenizer.from_pretrained(out), template)
    tok.save_pretrained(out)
    return out


@pytest.mark.parametrize("template", ["qwen2_5", "qwen3", "llama3_1"])
def test_the_tool_loop_reads_and_runs_calls_in_each_template(tiny_models, tmp_path, template):
    """The loop of chat / compare / the proof reads a call written in the template's own format with TRL's parser,
    runs it through the guard and hands the result back in the template's tool turn."""
    from transformers import AutoTokenizer

    from app.model.templates import tool_template_problem
    from app.run.counts import CallCounts
    from app.tools.builtin import calculator
    from app.tools.guard import Limits, guarded
    from app.tools.loop import run_tool_loop

    model_dir = _tiny_with_template(tiny_models, "qwen2", template, tmp_path)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tool_template_problem(tok, "tiny") is None
    tool = guarded(calculator, Limits(), CallCounts())
    conv = [{"role": "user", "content": "What is 12 + 30?"}]
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12 + 30"}}}]}
    # what the template has the model write for that call: the whole text after the generation prompt
    prompt = tok.apply_chat_template(conv, tools=[tool], add_generation_prompt=True, tokenize=False)
    whole = tok.apply_chat_template(conv + [call], tools=[tool], tokenize=False)
    written = whole[len(prompt):]
    seen = []

    def scripted(prompt_ids, n):
        seen.append(tok.decode(prompt_ids[0]))
        text = written if len(seen) == 1 else "Final answer: 42"
        return [tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]

    no_context = SimpleNamespace(config=SimpleNamespace())  # a config that gives no context: nothing is cut
    [r] = run_tool_loop(no_context, tok, [conv], [[tool]], max_calls=2, max_new_tokens=400, generate_batch=scripted)
    assert r.calls == 1 and r.failures == 0 and r.text == "Final answer: 42"
    assert r.turns[0]["tool_calls"][0]["function"]["arguments"] == {"expression": "12 + 30"}
    assert r.turns[1] == {"role": "tool", "name": "calculator", "content": "42"}
    assert "42" in seen[1] and "12 + 30" in seen[1]  # the second round saw the call and its result


def test_a_template_without_a_tool_format_is_one_line_before_any_model_loads(tiny_models, math_jsonl, tmp_path):
    model = _tiny_with_template(tiny_models, "qwen2", None, tmp_path, context=1024)
    r = cli_here("train", "--model", str(model), "--dataset", str(math_jsonl), "--tools", "calculator",
             "--output-dir", str(tmp_path / "runs"), "--dry-run")
    assert r.returncode == 2, r.stderr
    line = " ".join(r.stderr.split())  # the dry run's report wraps it; a run says it as one line (below)
    assert "Traceback" not in r.stderr
    assert "cannot render tool calls" in line and "--chat-template NAME" in line and "qwen2_5" in line
    r = cli_here("train", "--model", str(model), "--dataset", str(math_jsonl), "--tools", "calculator",
             "--chat-template", "qwen2_5", "--output-dir", str(tmp_path / "runs"), "--dry-run",
             "--set", "max_completion_length=768")
    # the prompts are measured with the tools' schemas the template renders: here they no longer fit beside 768
    assert r.returncode == 2 and "every prompt is longer than the 256 tokens" in " ".join(r.stderr.split())
    r = cli_here("train", "--model", str(model), "--dataset", str(math_jsonl), "--tools", "calculator",
             "--chat-template", "qwen2_5", "--output-dir", str(tmp_path / "runs"), "--dry-run",
             "--set", "max_completion_length=64")
    assert r.returncode == 0, r.stderr
    assert "tools: calculator (built-in)" in r.stdout + r.stderr
    r = cli_here("train", "--model", str(tiny_models["qwen2"]), "--dataset", str(math_jsonl), "--chat-template", "qwen9")
    assert r.returncode == 2 and "not a template TRL ships" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_bad_tool_file_is_one_line_and_leaves_no_run_folder(tiny_models, math_jsonl, tmp_path):
    bad = tmp_path / "bad_tools.py"
    bad.write_text("def add(a, b):\n    return a + b\n")
    r = cli_here("train", "--model", str(tiny_models["qwen2"]), "--dataset", str(math_jsonl), "--tools", str(bad),
             "--chat-template", "qwen2_5", "--output-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "tool 'add' in" in line and "docstring" in line
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------------- runs with tools

FLAKY_TOOLS = '''
import time


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: The arithmetic to compute, with numbers, + - * / and parentheses, for example "(12 + 30) / 7".

    Returns:
        The result as a number.
    """
    a = int(expression.split()[0]) if expression.split() and expression.split()[0].isdigit() else 0
    if a % 3 == 0:
        time.sleep(60)  # hangs: the guard's timeout answers for it
    if a % 3 == 1:
        raise RuntimeError("the calculator broke")
    return "7" * 100000  # floods: cut at tools.max_output_chars
'''

CALC_ENV = '''
from app.tools.builtin import calculator as _calc


class CalcEnv:
    """Counts the calls that gave the row's answer (read from the dataset's own answer column, which reset() gets
    beside the prompt and reference); the reward is whether the rollout made one."""

    def reset(self, **row):
        self.good = 0
        self.target = row.get("answer", "").rsplit("####", 1)[-1].strip()  # chat has no row

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: The arithmetic to compute, with numbers, + - * / and parentheses, for example "(12 + 30) / 7".

        Returns:
            The result as a number.
        """
        out = _calc(expression)
        self.good += out == self.target
        return out

    def get_reward(self) -> float:
        return float(self.good > 0)
'''


def _tool_run(tmp_path, name: str, **tools):
    from app.train.running.session import Session

    cfg = build_config({"method": "grpo", "model": {"name_or_path": str(TOOL_BASE)}, "output_dir": str(tmp_path),
                        "run_name": name, "tools": {"timeout_s": 0.5, "max_output_chars": 64, **tools}},
                       {"data": {"dataset": "arith-calc", "system_prompt": TOOLS_SYSTEM_PROMPT},
                        "training": {"max_steps": 2}},
                       ["per_device_train_batch_size=8", "gradient_accumulation_steps=1", "num_generations=4",
                        "max_completion_length=64", "gradient_checkpointing=false", "runtime.device=cpu",
                        "logging_steps=1", "save_steps=1", "training.proof_rows=6", "training.eval_every=2",
                        "training.eval_rows=4", "grpo.max_tool_calls=1"])
    return Session(cfg, progress=False).run()


@pytest.mark.slow
def test_a_hanging_raising_flooding_tool_never_stops_a_run_and_is_counted(tmp_path):
    tools = tmp_path / "flaky.py"
    tools.write_text(FLAKY_TOOLS)
    d = _tool_run(tmp_path, "flaky", use=[str(tools)])
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 2
    # the fast sampler sampled every round, the ones after the tools' results too, and never stepped down
    assert "sampling from a merged dense copy" in st["fast_paths"] and not st.get("fast_path_changes")
    counts = st[layout.TOOL_COUNTS]["calculator"]
    assert counts["calls"] > 0 and counts["timeouts"] > 0 and counts["failures"] >= counts["timeouts"]
    recs = store.read_metrics(d)
    assert sum(r.get("tools/calculator/calls", 0) for r in recs) == counts["calls"]
    from app.run.summary import run_summary
    from app.ui.run_view import status_markdown

    said = run_summary(d)["tools"]  # runs show / runs list / the UI's run view
    assert said.startswith(f"calculator {counts['calls']} calls, {counts['failures']} failed ({counts['timeouts']} "
                           "timed out)")
    assert f"tool calls: {said}" in status_markdown(run_summary(d))
    assert any(r.get(layout.TOOL_FAILURE_FREQUENCY, 0) > 0 for r in recs)  # TRL counted the failures too
    # the proof answered with the same tools: calls and results in the transcript, flooding output cut
    proof = json.loads((d / layout.COMPARE_JSON).read_text())
    turns = [t for row in proof["rows"] for side in ("base", "adapter") for t in row[side]["turns"] or []]
    results = [t["content"] for t in turns if t["role"] == "tool"]
    assert results and all(len(x) < 200 for x in results)
    assert any("did not answer within 0.5 s" in x for x in results) or any("broke" in x for x in results)
    assert proof["summary"]["adapter"]["tool_success"] is not None
    card = (d / layout.ADAPTER / "README.md").read_text()
    assert "tools: `flaky.py`" in card and "tool calls all succeeded" in card


@pytest.mark.slow
def test_a_run_that_ends_before_its_first_logged_step_counts_every_call(tmp_path):
    """The counts of the steps after the last logged line are taken when training ends: a 3-step tool run that logs
    every 5th step, with a calculator that hangs, raises and floods, has every call in status.json and metrics.jsonl,
    and why a call failed."""
    from app.train.running.session import Session

    calls_log = tmp_path / "calls.log"
    tools = tmp_path / "flaky.py"
    counted = f'    open({str(calls_log)!r}, "a").write("x\\n")\n'  # each call that reaches the tool
    tools.write_text(FLAKY_TOOLS.replace('    a = int(', counted + '    a = int(', 1))
    cfg = build_config({"method": "grpo", "model": {"name_or_path": str(TOOL_BASE)}, "output_dir": str(tmp_path),
                        "run_name": "unlogged", "tools": {"timeout_s": 0.5, "max_output_chars": 64,
                                                          "use": [str(tools)]}},
                       {"data": {"dataset": "arith-calc", "system_prompt": TOOLS_SYSTEM_PROMPT},
                        "training": {"max_steps": 3}},
                       ["per_device_train_batch_size=8", "gradient_accumulation_steps=1", "num_generations=4",
                        "max_completion_length=64", "gradient_checkpointing=false", "runtime.device=cpu",
                        "logging_steps=5", "save_steps=100", "training.proof_rows=0", "training.eval_every=0",
                        "grpo.max_tool_calls=1"])
    d = Session(cfg, progress=False).run()
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 3
    made = len(calls_log.read_text().splitlines())  # the calls that reached the tool (bad arguments do not)
    counts = st[layout.TOOL_COUNTS]["calculator"]
    assert made > 0 and counts["calls"] >= made and counts["timeouts"] > 0, (made, counts)
    assert counts["first_error"] and counts["failures"] >= counts["timeouts"]
    recs = store.read_metrics(d)
    assert not any("loss" in r for r in recs)  # no step was logged...
    assert sum(r.get("tools/calculator/calls", 0) for r in recs) == counts["calls"]  # ...yet every call is there
    from app.run.summary import run_summary

    assert "(first failure: " in run_summary(d)["tools"]  # why, in runs show, the UI and the terminal's summary


@pytest.mark.slow
def test_an_environment_run_trains_scores_its_reward_and_chats(tmp_path):
    env = tmp_path / "calc_env.py"
    env.write_text(CALC_ENV)
    d = _tool_run(tmp_path, "env", environment=f"{env}:CalcEnv")
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED
    recs = store.read_metrics(d)
    assert any(r.get("rewards/CalcEnv/mean") is not None for r in recs)  # the environment's own reward, logged
    assert any(r.get("rewards/CalcEnv/mean", 0) > 0 for r in recs)  # it read the rows' answers: some calls hit
    proof = json.loads((d / layout.COMPARE_JSON).read_text())  # the proof's environments were reset with rows too
    assert any(t["role"] == "tool" for row in proof["rows"] for t in row["adapter"]["turns"])
    assert st[layout.TOOL_COUNTS]["calculator"]["calls"] > 0
    assert any(r.get(layout.EVAL_TOOL_SUCCESS) is not None for r in recs)  # the held-out evaluation used it too

    from app.eval.chat import Chat

    chat, shown = Chat(d), []
    reply = chat.reply("adapter", "Tom has 457 apples. Tom buys 123 more apples. How many apples does Tom have now?",
                       on_text=shown.append)
    assert shown and shown[-1] == reply
    assert any(piece.startswith("> calculator(expression=") for piece in shown)
    assert chat.shown("adapter", reply).startswith("> calculator(expression=")  # the UI's and --both's transcript
    assert any(m["role"] == "tool" for m in chat.history["adapter"])


def test_a_tool_runs_modelfile_leaves_the_template_to_ollama(tiny_models, tmp_path):
    from transformers import AutoTokenizer

    from app.export.bundle import modelfile

    tok = AutoTokenizer.from_pretrained(_tiny_with_template(tiny_models, "qwen2", "qwen2_5", tmp_path))
    plain, _ = modelfile(tok, "m.gguf", None, tmp_path)
    text, notes = modelfile(tok, "m.gguf", "Use the tools.", tmp_path, tools=True)
    assert "TEMPLATE" in plain  # turns only: derived from the template rendered without tools
    assert "TEMPLATE" not in text and 'SYSTEM """Use the tools."""' in text and "PARAMETER stop" in text
    assert any("tool run" in n and "embedded in the GGUF" in n for n in notes)


@pytest.mark.slow
def test_a_tool_run_trains_on_two_processes_and_resumes(tmp_path):
    """torchrun (gloo, 2 CPU processes): each worker rebuilds the tools from the config; rank 0 writes the counts;
    --resume continues the tool run from its checkpoint."""
    out = tmp_path / "runs"
    common = ["--no-progress", "--set", "per_device_train_batch_size=4", "--set", "num_generations=4",
              "--set", "gradient_accumulation_steps=1", "--set", "max_completion_length=64", "--set",
              "save_steps=1", "--set", "training.proof_rows=0", "--set", "training.eval_every=0",
              "--set", "grpo.max_tool_calls=1"]
    r = _cli("train", "--model", str(TOOL_BASE), "--dataset", "arith-calc", "--tools", "calculator",
             "--max-steps", "2", "--num-processes", "2", "--output-dir", str(out), *common)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (d,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["world_size"] == 2
    first = st[layout.TOOL_COUNTS]["calculator"]["calls"]
    assert first > 0
    r = _cli("train", "--resume", str(d), "--max-steps", "3", "--num-processes", "2", "--no-progress")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 3
    assert [x["step"] for x in store.read_metrics(d)] == [1, 2, 3]
    logged = sum(x.get("tools/calculator/calls", 0) for x in store.read_metrics(d))
    assert logged > first and st[layout.TOOL_COUNTS]["calculator"]["calls"] == logged  # the whole run's, resumed


def test_the_train_form_passes_tools_and_an_environment_to_the_command(tmp_path):
    from app.ui import handlers as h

    form = h.form_defaults(None)
    assert form["tools"] == [] and form["max_tool_calls"] == 3
    tool_file = tmp_path / "my_tools.py"
    _, flags, sets, argv = h.form_to_cli({**form, "dataset": "arith-calc", "tools": ["calculator", str(tool_file)],
                                         "environment": f"{tool_file}:Env", "max_tool_calls": 2}, tmp_path)
    assert argv[argv.index("--tools"):argv.index("--tools") + 4] == ["--tools", "calculator", "--tools",
                                                                     str(tool_file)]
    assert argv[argv.index("--environment") + 1] == f"{tool_file}:Env" and "grpo.max_tool_calls=2" in sets
    assert flags["tools"] == {"use": ["calculator", str(tool_file)], "environment": f"{tool_file}:Env"}
    _, _, _, argv = h.form_to_cli({**form, "tools": []}, tmp_path)
    assert "--tools" not in argv and "--environment" not in argv


@pytest.mark.slow
def test_a_tool_run_steps_down_the_oom_ladder_and_finishes(tmp_path):
    """Out of memory while sampling a tool run's rollouts: the ladder's rung is taken, the tools rebuilt with the
    trainer, the run finishes and its counts cover every attempt."""
    import os

    r = cli("train", "--preset", "demo-tools", "--max-steps", "4", "--output-dir", str(tmp_path), "--no-progress",
            "--set", "training.eval_every=0", "--set", "training.proof_rows=0", "--set", "logging_steps=1", timeout=600,
            env={**os.environ, "QLORA_APP_FAULT": "oom@gen"})
    assert r.returncode == 0, r.stderr[-3000:]
    (d,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith(".")]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 4 and len(st["oom_changes"]) == 1
    assert st[layout.TOOL_COUNTS]["calculator"]["calls"] > 0
    assert [x["step"] for x in store.read_metrics(d)] == [1, 2, 3, 4]
