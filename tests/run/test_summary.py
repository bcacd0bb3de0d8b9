"""A run's summary lines (app/run/summary.py): call counts in words a person reads."""

import doctest


def test_call_times_read_as_people_read_them():
    import app.run.summary as summary

    res = doctest.testmod(summary)
    assert res.attempted > 0 and res.failed == 0
    line = summary.tools_text({"calculator": {"calls": 21, "failures": 21, "timeouts": 0, "mean_latency_ms": 1042.0,
                                              "first_error": "ToolFailed: not arithmetic"}})
    assert "calculator 21 calls, 21 failed, 1,042 ms each (first failure: ToolFailed: not arithmetic)" in line
    assert "e+03" not in line
