"""GRPO runs end to end with a judge in the reward: served by a real llama.cpp server (llama-cpp-python's
OpenAI-compatible server on a GGUF `qlora-app export` made), by a local judge model loaded in 4-bit, and by an endpoint
that hangs or answers garbage (counted; the run finishes)."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from judge_server import JudgeServer, _Judge
from repo_paths import ROOT
from conftest import cli

from app.config.build import build_config
from app.run import layout, store

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _judged_run(tmp_path, model: Path, dataset: Path, name: str, judge: dict, steps: int = 3) -> Path:
    from app.train.running.session import Session

    cfg = build_config({"method": "grpo", "model": {"name_or_path": str(model)}, "output_dir": str(tmp_path),
                        "run_name": name, "reward": {"judge": judge}},
                       {"data": {"dataset": str(dataset)}, "training": {"max_steps": steps}},
                       ["per_device_train_batch_size=8", "gradient_accumulation_steps=1", "num_generations=4",
                        "max_completion_length=16", "gradient_checkpointing=false", "runtime.device=cpu",
                        "logging_steps=1", "save_steps=100", "training.proof_rows=4", "training.eval_every=0"])
    return Session(cfg, progress=False).run()


def _judged_everything(d: Path) -> dict:
    """The run finished, scored every step with the judge, logged and recorded its counts; returns the counts."""
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED, st.get("error")
    counts = st[layout.JUDGE_COUNTS]["judge"]
    recs = [r for r in store.read_metrics(d) if "loss" in r]
    judged = [r["rewards/judge/mean"] for r in recs if r.get("rewards/judge/mean") is not None]
    assert judged and all(0.0 <= v <= 1.0 for v in judged)
    assert sum(r.get("judge/calls", 0) for r in recs) <= counts["calls"]  # the proof's judgements come after
    proof = json.loads((d / layout.COMPARE_JSON).read_text())
    assert all("judge" in row["adapter"]["components"] for row in proof["rows"])  # the proof scores with it too
    return counts


@pytest.fixture(scope="module")
def llama_cpp_judge(tiny_models, tmp_path_factory):
    """llama-cpp-python's OpenAI-compatible server on a GGUF exported by `qlora-app export` from a run."""
    pytest.importorskip("llama_cpp.server.app")
    from fakes import make_adapter, write_run

    root = tmp_path_factory.mktemp("judge-gguf")
    run = write_run(root / "run", tiny_models["qwen3"], make_adapter(tiny_models["qwen3"], root / "a"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    r = cli("export", str(run), "--format", "gguf", "--outtype", "f32", "--out", str(root / "gguf"), timeout=600,
            env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    gguf = next((root / "gguf").glob("*.gguf"))
    port = _free_port()
    log = (root / "server.log").open("w")  # a file, not a pipe: a pipe nobody reads fills and stalls the server
    server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                               "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"],
                              stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=1) as resp:
                    model = json.loads(resp.read())["data"][0]["id"]
                break
            except OSError:
                assert server.poll() is None, (root / "server.log").read_text()[-2000:]
                time.sleep(0.25)
        else:
            pytest.fail("llama.cpp's server did not start in 60 s")
        yield url, model
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_a_grpo_run_judged_by_a_real_llama_cpp_server(llama_cpp_judge, tiny_models, math_jsonl, tmp_path):
    url, model = llama_cpp_judge
    d = _judged_run(tmp_path, tiny_models["qwen3"], math_jsonl, "llama-judge", {"url": url, "timeout_s": 60})
    counts = _judged_everything(d)
    # llama-cpp-python takes OpenAI's json_object with a schema: the tiny judge can only write {"score": N}
    assert counts["calls"] > 0 and counts["failures"] == 0, counts
    from app.run.summary import run_summary

    assert run_summary(d)["judgements"].startswith(f"judge {counts['calls']} judgements, 0 failed")
    assert model  # the endpoint's own first model was asked for


def test_a_grpo_run_judged_by_a_local_model(tiny_models, math_jsonl, tmp_path):
    d = _judged_run(tmp_path, tiny_models["qwen3"], math_jsonl, "local-judge", {"model": str(tiny_models["llama"])})
    counts = _judged_everything(d)
    assert counts["calls"] > 0 and counts["failures"] == 0, counts
    lines = (d / layout.LOG).read_text()
    assert "judge: local model" in lines and "counted in the memory estimate" in lines  # the plan said it


def test_a_judge_that_hangs_or_talks_nonsense_never_stops_a_run(tiny_models, math_jsonl, tmp_path):
    from threading import Thread

    # the judge answers the run's probe (one judgement before the model loads), then talks nonsense or hangs
    _Judge.mode, _Judge.seen, _Judge.fails_left, _Judge.ok_left = "garbage", [], 0, 1
    server = JudgeServer(("127.0.0.1", 0), _Judge)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        d = _judged_run(tmp_path, tiny_models["qwen3"], math_jsonl, "garbage", {"url": url, "retries": 0}, steps=2)
        st = store.read_status(d)
        assert st["status"] == layout.FINISHED
        c = st[layout.JUDGE_COUNTS]["judge"]
        assert c["calls"] > 0 and c["failures"] == c["calls"] and c["timeouts"] == 0
        assert "no 0-10 score in the reply" in (d / layout.LOG).read_text()  # logged, not raised
        import io

        from rich.console import Console

        from app.cli.plan_report import print_run_summary

        shown = io.StringIO()  # the summary `train` and `runs show` print: no curve for a judge that never scored
        print_run_summary(d, Console(file=shown, width=200))
        assert "rewards/judge/mean" not in shown.getvalue() and "judgements" in shown.getvalue()
        _Judge.mode, _Judge.ok_left = "hang", 1
        d = _judged_run(tmp_path, tiny_models["qwen3"], math_jsonl, "hang", {"url": url, "retries": 0,
                                                                               "timeout_s": 0.3}, steps=1)
        st = store.read_status(d)
        assert st["status"] == layout.FINISHED and st[layout.JUDGE_COUNTS]["judge"]["timeouts"] > 0
    finally:
        server.shutdown()
