"""app/host/alloc.py: the allocator settings a CPU training step needs, never over a user's own."""

import sys

import pytest

from app.host import alloc


class FakeLibc:
    def __init__(self):
        self.calls = []

        def mallopt(param, value):
            self.calls.append((param, value))
            return 1

        self.mallopt = mallopt


@pytest.fixture
def libc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(alloc.ctypes, "CDLL", lambda name: fake)
    monkeypatch.setattr(alloc.sys, "platform", "linux")
    return fake


def test_sets_both_thresholds_on_glibc(libc):
    assert alloc.reuse_freed_memory(env={}) is True
    assert libc.calls == [(alloc.M_MMAP_THRESHOLD, 32 * 2**20), (alloc.M_TRIM_THRESHOLD, 256 * 2**20)]


@pytest.mark.parametrize("var", ["GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "LD_PRELOAD"])
def test_a_users_own_allocator_setup_wins(libc, var):
    assert alloc.reuse_freed_memory(env={var: "x"}) is False and libc.calls == []
    assert alloc.user_chose({var: "x"}) == var


def test_other_platforms_and_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(alloc.sys, "platform", "darwin")
    assert alloc.reuse_freed_memory(env={}) is False

    def no_libc(name):
        raise OSError("no libc")
    monkeypatch.setattr(alloc.sys, "platform", "linux")
    monkeypatch.setattr(alloc.ctypes, "CDLL", no_libc)
    assert alloc.reuse_freed_memory(env={}) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_the_real_glibc_takes_them():
    assert alloc.reuse_freed_memory(env={}) is True  # this machine's libc accepts both values
