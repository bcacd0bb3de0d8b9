"""A run's counts (app/run/counts.py): one object for reward failures, tool calls and judgements; what was counted
after the last logged line is still taken; a resumed run adds to its record without counting twice; the first
failure's text is kept."""

import pickle

from app.run import layout
from app.run.counts import CallCounts, RewardErrors, RunCounts


def test_take_gives_what_was_counted_since_the_last_take_and_the_totals_keep_everything():
    counts = RunCounts()
    counts.tools.add("calculator", calls=1, seconds=0.5)
    counts.tools.add("calculator", calls=1, failures=1, error="ToolFailed: boom")
    counts.judge.add("judge", calls=3, failures=3, timeouts=1, seconds=3.0, error="timeout: 30 s")
    taken = counts.take()
    assert taken["tools"]["calculator"]["calls"] == 2 and taken["judge"]["judge"]["calls"] == 3
    line = counts.metrics(taken)
    assert line["tools/calculator/calls"] == 2 and line["tools/calculator/failures"] == 1
    assert line["judge/calls"] == 3 and line["judge/timeouts"] == 1 and line[layout.REWARD_ERRORS] == 0
    assert counts.take() == {"tools": {}, "judge": {}}  # nothing new
    counts.tools.add("calculator", calls=4)
    assert counts.take()["tools"]["calculator"]["calls"] == 4
    status = counts.status_fields()
    assert status[layout.TOOL_COUNTS]["calculator"]["calls"] == 6
    assert status[layout.TOOL_COUNTS]["calculator"]["first_error"] == "ToolFailed: boom"
    assert status[layout.JUDGE_COUNTS]["judge"] == {"calls": 3, "failures": 3, "timeouts": 1,
                                                    "mean_latency_ms": 1000.0, "first_error": "timeout: 30 s"}


def test_a_resumed_run_adds_to_its_record_and_counts_nothing_twice():
    first = RunCounts()
    first.tools.add("calculator", calls=5, failures=2, seconds=1.0, error="RuntimeError: broke")
    first.reward_errors.add("reference", ValueError("bad"))
    first.take()
    recorded = first.status_fields()
    resumed = RunCounts()
    resumed.restore(recorded)
    assert resumed.take() == {"tools": {}, "judge": {}}  # the earlier attempts' calls are not new calls
    resumed.tools.add("calculator", calls=3)
    resumed.take()
    status = resumed.status_fields()
    assert status[layout.TOOL_COUNTS]["calculator"]["calls"] == 8
    assert status[layout.TOOL_COUNTS]["calculator"]["failures"] == 2
    assert status[layout.TOOL_COUNTS]["calculator"]["first_error"] == "RuntimeError: broke"
    assert status[layout.REWARD_ERRORS] == 1 and status[layout.REWARD_ERROR_TEXTS] == {"reference": "ValueError: bad"}


def test_sum_over_ranks_is_the_callers_and_the_totals_are_every_ranks():
    counts = RunCounts()
    counts.tools.add("calculator", calls=2)
    taken = counts.take(lambda mine: {n: {k: 2 * v for k, v in row.items()} for n, row in mine.items()})
    assert taken["tools"]["calculator"]["calls"] == 4
    assert counts.status_fields()[layout.TOOL_COUNTS]["calculator"]["calls"] == 4


def test_counters_pickle_with_their_counts_and_a_fresh_lock():
    errors, calls = RewardErrors(), CallCounts()
    errors.add("format", KeyError("x"))
    calls.add("calc", calls=1, failures=1, error="boom")
    errors2, calls2 = pickle.loads(pickle.dumps(errors)), pickle.loads(pickle.dumps(calls))
    assert errors2() == 1 and errors2.first == {"format": "KeyError: 'x'"}
    assert calls2.summary()["calc"]["first_error"] == "boom"
    errors2.add("format", KeyError("y"))
    calls2.add("calc", calls=1)
    assert errors2() == 2 and calls2.summary()["calc"]["calls"] == 2


def test_a_run_that_counted_nothing_records_nothing():
    assert RunCounts().status_fields() == {}
