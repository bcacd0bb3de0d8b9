"""Tools (app/tools): the built-in calculator, the guard around every call (hangs, raises, huge output, bad
arguments: the caller goes on and the counts say so), tool files and environments checked in one line before any
model loads, and the chat-template check."""

from __future__ import annotations

import pickle
import textwrap
import time

import pytest
from conftest import cli

from app.config.build import build_config
from app.errors import UserError
from app.run.counts import CallCounts, as_metrics
from app.tools.builtin import calculator
from app.tools.guard import Limits, ToolFailed, guarded, guarded_environment
from app.tools.loop import call_tool, transcript_lines
from app.tools.toolbox import load_toolbox


@pytest.mark.parametrize("expression, result", [("12 + 30", "42"), ("(12 + 30) / 7", "6"), ("7 / 2", "3.5"),
                                                ("2 ** 10", "1024"), ("-3 * 4", "-12"), ("10 // 3", "3"),
                                                ("3 × 4", "12")])
def test_calculator_computes(expression, result):
    assert calculator(expression) == result


@pytest.mark.parametrize("expression, says", [("__import__('os').system('id')", "not arithmetic"),
                                              ("x + 1", "not arithmetic"), ("1 / 0", "division by zero"),
                                              ("9 ** 9 ** 9", "too large"), ("", "empty"), ("12 and 3", "not arith"),
                                              ("1 +", "not an arithmetic expression")])
def test_calculator_refuses_what_is_not_arithmetic(expression, says):
    with pytest.raises(ValueError, match=says):
        calculator(expression)


def _slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "woke"


def _raises(x: int) -> str:
    """Fail.

    Args:
        x: Anything.
    """
    raise RuntimeError(f"broken on {x}")


def _huge(n: int) -> str:
    """A long text.

    Args:
        n: How many characters.
    """
    return "x" * n


def test_a_hung_tool_is_an_error_result_and_the_caller_goes_on():
    stats = CallCounts()
    slow = guarded(_slow, Limits(timeout_s=0.2), stats)
    t = time.perf_counter()
    name, text, ok = call_tool({"_slow": slow}, {"type": "function", "function": {"name": "_slow",
                                                                                   "arguments": {"seconds": 30}}})
    assert time.perf_counter() - t < 2 and not ok
    assert "did not answer within 0.2 s" in text and text.startswith("{'error'")
    assert slow(seconds=0) == "woke"  # the next call works
    s = stats.summary()["_slow"]
    assert s["calls"] == 2 and s["timeouts"] == 1 and s["failures"] == 1


def test_a_raising_tool_a_huge_result_and_bad_arguments_are_counted():
    stats = CallCounts()
    limits = Limits(timeout_s=5, max_output_chars=100)
    tools = {"_raises": guarded(_raises, limits, stats), "_huge": guarded(_huge, limits, stats)}
    _, text, ok = call_tool(tools, {"type": "function", "function": {"name": "_raises", "arguments": {"x": 3}}})
    assert not ok and "RuntimeError: broken on 3" in text
    _, text, ok = call_tool(tools, {"type": "function", "function": {"name": "_huge", "arguments": {"n": 10**6}}})
    assert ok and len(text) < 200 and "[cut: 999900 more characters]" in text
    _, text, ok = call_tool(tools, {"type": "function", "function": {"name": "_huge", "arguments": {"m": 1}}})
    assert not ok and "bad arguments for _huge" in text
    _, text, ok = call_tool(tools, {"type": "function", "function": {"name": "nope", "arguments": {}}})
    assert not ok and "Tool nope not found" in text
    _, text, ok = call_tool(tools, {"type": "function", "function": {"name": "_huge", "arguments": "n=3"}})
    assert not ok and "JSON object" in text
    with pytest.raises(ToolFailed):  # what TRL sees: an exception it turns into {'error': ...} and counts
        tools["_raises"](x=1)
    took = as_metrics(stats.take_counts())
    assert took["tools/_raises/calls"] == 2 and took["tools/_raises/failures"] == 2
    assert took["tools/_huge/calls"] == 2 and took["tools/_huge/failures"] == 1 and "tools/_huge/latency_ms" in took
    assert stats.take_counts() == {}  # counts since the last take
    assert pickle.loads(pickle.dumps(stats)).summary() == stats.summary()
    resumed = CallCounts()  # a resumed run carries on from the recorded totals
    resumed.restore(stats.summary())
    assert resumed.take_counts() == {} and resumed.summary()["_huge"]["calls"] == 2
    resumed.add("_huge", calls=1)
    assert resumed.summary()["_huge"]["calls"] == 3 and resumed.take_counts()["_huge"]["calls"] == 1


def test_a_guarded_tool_keeps_the_schema_the_model_sees():
    from transformers.utils import get_json_schema

    assert get_json_schema(guarded(calculator, Limits(), CallCounts())) == get_json_schema(calculator)


class Counter:
    """A tiny environment: the model adds to a counter; the reward is whether it reached the target."""

    def reset(self, **row):
        self.total, self.target = 0, 3
        return " (start at 0)"

    def add(self, amount: int) -> str:
        """Add to the counter.

        Args:
            amount: How much to add.
        """
        self.total += amount
        return str(self.total)

    def get_reward(self) -> float:
        return float(self.total == self.target)


def test_an_environment_is_guarded_method_by_method_and_keeps_its_name():
    stats = CallCounts()
    cls = guarded_environment(Counter, Limits(), stats)
    env = cls()
    assert cls.__name__ == "Counter" and env.reset() == " (start at 0)"
    assert env.add(amount=3) == "3" and env.get_reward() == 1.0
    with pytest.raises(ToolFailed, match="bad arguments"):
        env.add(count=1)
    assert stats.summary()["add"]["calls"] == 2


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def _cfg(tmp_path, **tools):
    return build_config({"tools": tools, "method": "grpo"}).tools


def test_tool_files_and_environments_load_with_their_origins(tmp_path):
    f = _write(tmp_path, "mytools.py", '''
        import os
        from os.path import join

        def weather(city: str) -> str:
            """The weather in a city.

            Args:
                city: The city.
            """
            return "sunny"

        def _helper():
            pass
    ''')
    e = _write(tmp_path, "env.py", '''
        class Shop:
            def reset(self, **row):
                self.cart = []

            def buy(self, item: str) -> str:
                """Buy an item.

                Args:
                    item: What to buy.
                """
                self.cart.append(item)
                return "ok"
    ''')
    box = load_toolbox(_cfg(tmp_path, use=["calculator", str(f)], environment=f"{e}:Shop"))
    assert box.names == ["calculator", "weather", "buy"] and box.origins["calculator"] == "built-in"
    assert [s["function"]["name"] for s in box.schemas()] == ["calculator", "weather", "buy"]
    box = load_toolbox(_cfg(tmp_path, use=[f"{f}:weather"]))
    assert box.names == ["weather"]


@pytest.mark.parametrize("source, entry, says", [
    ("def add(a: int, b: int) -> int:\n    return a + b\n", "{f}", "tool 'add' in .*has no docstring"),
    ('def add(a, b: int) -> int:\n    """Add.\n\n    Args:\n        a: x\n        b: y\n    """\n', "{f}",
     "tool 'add' in .*type hint"),
    ("X = 1\n", "{f}", "defines no public function"),
    ("def calculator(expression: str) -> str:\n    '''Mine.\n\n    Args:\n        expression: e\n    '''\n",
     "{f}", "two tools are named 'calculator'"),
    ("def f(x: int) -> int:\n    '''F.\n\n    Args:\n        x: x\n    '''\n", "{f}:g", "has no function 'g'"),
    ("raise SystemError('boom')\n", "{f}", "failed to import"),
])
def test_bad_tool_files_are_one_line(tmp_path, source, entry, says):
    f = _write(tmp_path, "t.py", source)
    with pytest.raises(UserError, match=says) as e:
        load_toolbox(_cfg(tmp_path, use=["calculator", entry.format(f=f)]))
    assert "\n" not in str(e.value)


def test_bad_environments_and_names_are_one_line(tmp_path):
    e = _write(tmp_path, "env.py", "class NoReset:\n    def go(self, x: int) -> int:\n        '''Go.\n\n"
                                   "        Args:\n            x: x\n        '''\n")
    for entry, says in ((f"{e}:NoReset", "has no reset"), (f"{e}:Missing", "has no class 'Missing'"),
                        (str(e), "must look like 'path/to/file.py:ClassName'")):
        with pytest.raises(UserError, match=says):
            load_toolbox(_cfg(tmp_path, environment=entry))
    with pytest.raises(UserError, match="neither a built-in tool .*calculator"):
        load_toolbox(_cfg(tmp_path, use=["calculater"]))
    with pytest.raises(UserError, match="not found"):
        load_toolbox(_cfg(tmp_path, use=[str(tmp_path / "missing.py")]))


def test_tools_are_a_grpo_setting():
    with pytest.raises(Exception, match="tools and environments train with GRPO"):
        build_config({"method": "sft", "tools": {"use": ["calculator"]}})


def test_the_transcript_shows_each_call_and_result():
    turns = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1 + 2"}}}]},
        {"role": "tool", "name": "calculator", "content": "3"}, {"role": "assistant", "content": "Final answer: 3"}]
    assert transcript_lines(turns) == ["calculator(expression='1 + 2')", "-> 3"]


def test_tool_files_are_saved_as_absolute_paths_and_built_ins_stay_names(tmp_path):
    from app.config.build import with_absolute_paths

    (tmp_path / "mine.py").write_text("")
    cfg = build_config({"method": "grpo", "tools": {"use": ["calculator", "mine.py", "mine.py:a,b", "pkg.mod:f"],
                                                    "environment": "mine.py:Env"}})
    t = with_absolute_paths(cfg, tmp_path).tools
    mine = str((tmp_path / "mine.py").resolve())
    assert t.use == ["calculator", mine, f"{mine}:a,b", "pkg.mod:f"] and t.environment == f"{mine}:Env"


def test_an_environment_is_reset_with_the_rows_columns_and_a_failing_reset_is_one_line(tmp_path):
    from app.ask.asking import item_tools

    env = _write(tmp_path, "env.py", '''
        class Needs:
            def reset(self, **row):
                self.want = row["target"]
                return f" (target {self.want})"

            def check(self, value: int) -> str:
                """Check a value.

                Args:
                    value: The value.
                """
                return str(value == self.want)
    ''')
    cfg = build_config({"method": "grpo", "tools": {"environment": f"{env}:Needs"}})
    item = {"messages": [{"role": "user", "content": "go"}], "reference": "3", "row": {"target": 3, "x": 1}}
    [tools], [conv] = item_tools(cfg, [item])
    assert conv[-1]["content"] == "go (target 3)" and item["messages"][-1]["content"] == "go"
    assert [t.__name__ for t in tools] == ["check"] and tools[0](value=3) == "True"
    with pytest.raises(UserError, match=r"Needs.reset\(\) failed \(KeyError: 'target'\) on a row with the columns "
                                        r"prompt, reference") as e:
        item_tools(cfg, [{"messages": [], "reference": None}])
    assert "\n" not in str(e.value)


async def _async_add(a: int, b: int) -> str:
    """Add, the async way.

    Args:
        a: One number.
        b: The other.
    """
    import asyncio

    await asyncio.sleep(0)
    return str(a + b)


def _exits(code: int) -> str:
    """Exit the process (garbage a tool may do).

    Args:
        code: The exit code.
    """
    import sys

    sys.exit(code)


def test_an_async_tool_runs_and_a_tool_that_exits_is_an_error_result():
    import inspect

    stats = CallCounts()
    add = guarded(_async_add, Limits(timeout_s=5), stats)
    assert not inspect.iscoroutinefunction(add)  # TRL calls it as a plain function
    assert add(a=2, b=3) == "5"
    _, text, ok = call_tool({"_exits": guarded(_exits, Limits(), stats)},
                            {"type": "function", "function": {"name": "_exits", "arguments": {"code": 3}}})
    assert not ok and "SystemExit" in text  # the run is still here


def test_an_environments_get_reward_that_hangs_raises_or_talks_scores_none_and_is_counted():
    class Moody:
        """Its reward: a number, then a hang, an exception and a word."""

        answers = iter([0.5, "hang", "raise", "great", True])

        def reset(self, **row):
            pass

        def act(self, x: int) -> str:
            """Act.

            Args:
                x: Anything.
            """
            return "ok"

        def get_reward(self):
            a = next(Moody.answers)
            if a == "hang":
                time.sleep(30)
            if a == "raise":
                raise RuntimeError("no reward today")
            return a

    stats = CallCounts()
    env = guarded_environment(Moody, Limits(timeout_s=0.2), stats)()
    assert [env.get_reward() for _ in range(5)] == [0.5, None, None, None, 1.0]
    s = stats.summary()["Moody.get_reward"]
    assert s["calls"] == 5 and s["failures"] == 3 and s["timeouts"] == 1


@pytest.mark.parametrize("kind", ["init", "reset"])
def test_an_environment_that_cannot_be_made_or_reset_is_one_line_before_the_model_loads(tmp_path, kind):
    """TRL makes each environment with no arguments and resets it with the training row: an __init__ that needs an
    argument, or a reset() that fails on the data's rows, used to be a 60-line traceback after the model loaded and a
    failed run folder; now exit 2, one line, nothing made (the run and its dry run)."""
    import os

    from repo_paths import ROOT

    init = "\n    def __init__(self, shop_id):\n        self.shop_id = shop_id\n" if kind == "init" else ""
    env = tmp_path / "shop.py"
    env.write_text(f"""class Shop:{init}
    def reset(self, **row):
        self.stock = row["inventory"]

    def price(self, item: str) -> str:
        \"\"\"The price of an item.

        Args:
            item: The item's name.
        \"\"\"
        return "3"
""")
    said = ("Shop() failed (TypeError:" if kind == "init" else
            "Shop.reset() failed on the first training row (KeyError: 'inventory')")
    runs = tmp_path / "runs"
    for dry in ([], ["--dry-run"]) if kind == "init" else ([],):
        r = cli("train", "--preset", "demo-tools", "--environment", f"{env}:Shop", "--output-dir", str(runs), *dry,
                timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "400"})
        assert r.returncode == 2, r.stderr[-2000:]
        assert said in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert not runs.exists()


def test_a_tool_named_twice_is_one_tool_and_a_loose_signature_is_refused(tmp_path):
    from app.config.schema import ToolsConfig

    assert ToolsConfig(use=["calculator", " calculator", "calculator"]).use == ["calculator"]
    assert [f.__name__ for f in load_toolbox(_cfg(tmp_path, use=["calculator", "calculator"])).functions] == [
        "calculator"]
    f = _write(tmp_path, "loose.py", '''
        def total(*numbers: int) -> str:
            """Add numbers.

            Args:
                numbers: The numbers.
            """
            return str(sum(numbers))
    ''')
    with pytest.raises(UserError, match=r"tool 'total' in .*takes \*numbers \(the model can only pass the named"):
        load_toolbox(_cfg(tmp_path, use=[str(f)]))


def test_a_tool_file_that_exits_at_import_is_one_line_even_in_a_dry_run(tmp_path):
    import os

    from repo_paths import ROOT

    f = tmp_path / "quits.py"
    f.write_text("import sys\nsys.exit(3)\n")
    for dry in ([], ["--dry-run"]):
        r = cli("train", "--preset", "demo-tools", "--tools", str(f), "--output-dir", str(tmp_path / "runs"), *dry,
                timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "300"})
        assert r.returncode == 2, (dry, r.returncode, r.stderr[-1500:])
        assert "failed to import (SystemExit: 3)" in r.stderr and len(r.stderr.strip().splitlines()) == 1
