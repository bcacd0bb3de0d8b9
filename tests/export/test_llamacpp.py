"""llama.cpp runs where its death cannot take the caller (app/export/llamacpp.py): a child killed by an illegal
instruction is one line naming it, the probe finds the way quantized files run on this CPU (a fault injected in the
child as a CPU that advertises AMX but faults on it would), and the plain CPU buffers really are asked for."""

import os
import signal

import pytest

from app.export.llamacpp import LlamaCppDied, in_child, probe

pytestmark = pytest.mark.filterwarnings("ignore")


def _faults(path: str, plain: bool) -> int:
    os.kill(os.getpid(), signal.SIGILL)  # what llama.cpp's repacked kernels do on such a CPU
    return 0


def _faults_unless_plain(path: str, plain: bool) -> int:
    if not plain:
        os.kill(os.getpid(), signal.SIGILL)
    return 1


def _raises(path: str, plain: bool) -> int:
    raise RuntimeError("failed to load model")


def _extra_bufts(path: str, plain: bool) -> bool:
    from app.export.llamacpp import open_gguf

    llm = open_gguf(__import__("pathlib").Path(path), plain=plain, n_ctx=32)
    try:
        llm.eval([1])
        return bool(llm.model_params.use_extra_bufts)
    finally:
        llm.close()


def test_a_child_that_faults_is_one_line_naming_the_cause_and_the_caller_lives(tmp_path):
    with pytest.raises(LlamaCppDied) as e:
        in_child(_faults, "x.gguf", False, what="on one token")
    line = str(e.value)
    assert "\n" not in line and "SIGILL" in line and "illegal instruction" in line and "qlora-app doctor" in line
    with pytest.raises(LlamaCppDied, match=r"failed on one token \(RuntimeError: failed to load model\)"):
        in_child(_raises, "x.gguf", False, what="on one token")
    assert in_child(_faults_unless_plain, "x.gguf", True) == 1  # an answer comes back


def test_the_probe_finds_how_quantized_files_run_here(tmp_path):
    f = tmp_path / "probe.gguf"
    f.write_bytes(b"")
    amx = probe(runner=_faults_unless_plain, probe_file=f, cache=False)
    assert amx.mode == "plain" and amx.plain and "use_extra_bufts=False" in amx.line and "SIGILL" in amx.detail
    broken = probe(runner=_faults, probe_file=f, cache=False)
    assert broken.mode == "broken" and "export --outtype f16" in broken.line
    assert probe(runner=_faults_unless_plain, probe_file=f, cache=False).detail.count("SIGILL") == 1


def test_the_real_probe_and_the_plain_buffers():
    """This machine's probe on a real quantized file (one token in a child), and what the plain mode changes:
    llama.cpp's model parameters say use_extra_bufts False only when asked."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("conversion")
    from app.export.llamacpp import probe_gguf

    found = probe(cache=False)
    assert found.mode in ("default", "plain", "broken")
    f = probe_gguf()
    assert f.is_file() and f.stat().st_size > 100_000
    if found.mode != "broken":
        assert in_child(_extra_bufts, str(f), True) is False
        assert in_child(_extra_bufts, str(f), False) is (found.mode == "default")


def test_open_gguf_runs_llama_cpp_the_probes_way_and_says_so(monkeypatch, caplog):
    """On a machine the probe found faulting (AMX advertised, not working), every GGUF opened by our helpers takes
    the plain CPU buffers, and the first open says so."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("conversion")
    import logging

    import app.export.llamacpp as m

    monkeypatch.setattr(m, "probe", lambda *a, **k: m.Probe("plain"))
    monkeypatch.setattr(m, "_SAID", [])
    with caplog.at_level(logging.WARNING, logger="qlora_app"):
        llm = m.open_gguf(m.probe_gguf(), n_ctx=32)
    try:
        assert llm.model_params.use_extra_bufts is False
    finally:
        llm.close()
    assert "use_extra_bufts=False" in caplog.text
    import llama_cpp

    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True  # the patch ended with the open
