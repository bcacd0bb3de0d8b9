"""CPU threads: the cores other processes leave free, so two jobs on a small machine do not thrash."""

import pytest

from app.host import threads as ct


def test_fair_threads_takes_what_others_leave():
    assert ct.fair_threads(2, 0.0) == 2 and ct.fair_threads(2, 0.3) == 2  # background noise: still both cores
    assert ct.fair_threads(2, 0.9) == 1 and ct.fair_threads(2, 2.0) == 1  # another job: one, never zero
    assert ct.fair_threads(16, 3.2) == 13 and ct.fair_threads(4, None) == 4  # no /proc: all cores


def test_others_busy_leaves_out_this_process(monkeypatch):
    monkeypatch.setattr(ct.os, "cpu_count", lambda: 2)
    # 2 CPUs, 1 s at 100 Hz: 200 jiffies in all; 150 busy, of which this process used 50 -> others: 1 core
    before, after = (1000.0, 500.0, 10.0), (1200.0, 550.0, 60.0)
    assert ct.others_busy(before, after, 2) == pytest.approx(1.0)
    assert ct.others_busy(after, before, 2) is None  # no time passed: no reading


def test_an_explicit_choice_is_never_overridden(monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(ct, "_snapshot", lambda: pytest.fail("measured the machine despite OMP_NUM_THREADS"))
    g = ct.ThreadGovernor()
    assert g.threads == 1 == torch.get_num_threads() and g.adjust() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert ct.ThreadGovernor(setting=2).threads == 2  # runtime.threads


def test_the_governor_steps_down_when_another_job_starts_and_back_up(monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(ct, "usable_cores", lambda: 2)
    monkeypatch.setattr(ct.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(ct, "PROBE_SECONDS", 0.0)
    clock = {"t": 0.0}
    monkeypatch.setattr(ct.time, "monotonic", lambda: clock["t"])
    # (all jiffies, idle, own): each look advances 1 s of 2 CPUs = 200 jiffies
    busy_others = iter([0.0, 0.0, 1.8, 0.1, 0.1])  # idle at start, then another job, then it ends
    state = {"total": 0.0, "idle": 0.0, "own": 0.0}

    def snap():
        others = next(busy_others)
        state["total"] += 200
        state["idle"] += 200 - others * 100 - 50
        state["own"] += 50
        return state["total"], state["idle"], state["own"]

    monkeypatch.setattr(ct, "_snapshot", snap)
    said = []
    g = ct.ThreadGovernor(note=said.append)
    assert g.threads == 2 and not said  # an idle machine: both cores, nothing said
    assert g.adjust() == 2  # too soon to look again
    clock["t"] = 10.0
    assert g.adjust() == 1 and torch.get_num_threads() == 1  # another job took ~2 cores
    clock["t"] = 20.0
    assert g.adjust() == 1  # one quiet look is not enough to step up (the other job may only be between steps)
    clock["t"] = 30.0
    assert g.adjust() == 2 and torch.get_num_threads() == 2  # it ended: both cores again


def _busy_two_cores(monkeypatch) -> None:
    """A 2-core machine whose one look finds 1.9 cores busy, none of it ours; no OMP_NUM_THREADS."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(ct, "usable_cores", lambda: 2)
    monkeypatch.setattr(ct.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(ct, "PROBE_SECONDS", 0.0)
    snaps = iter([(0.0, 0.0, 0.0), (200.0, 10.0, 0.0)])  # 1.9 cores busy, none of it ours
    monkeypatch.setattr(ct, "_snapshot", lambda: next(snaps))


def test_a_busy_machine_at_start_is_said_once(monkeypatch):
    _busy_two_cores(monkeypatch)
    said = []
    assert ct.ThreadGovernor(note=said.append).threads == 1
    assert len(said) == 1 and "the machine is busy" in said[0] and "runtime.threads" in said[0]


def test_a_command_takes_the_free_cores_once(monkeypatch):
    """compare and chat: one look, torch's threads set to the fair share, the user's own number never overridden."""
    import torch

    _busy_two_cores(monkeypatch)
    before = torch.get_num_threads()
    said = []
    try:
        assert ct.use_free_cores(note=said.append) == 1 and torch.get_num_threads() == 1
        assert len(said) == 1 and "for this command" in said[0]
        monkeypatch.setattr(ct, "_snapshot", lambda: pytest.fail("looked at the machine"))
        assert ct.use_free_cores(2) == 2 and torch.get_num_threads() == 2  # runtime.threads: no look
    finally:
        torch.set_num_threads(before)
