"""`qlora-app serve RUN --engine vllm`: the command vLLM's own server is started with (decided and tested on any
machine; it runs where CUDA and vllm are): the two model names of the built-in server, the base loaded as trained,
the key kept off the command line; refused in one line where vLLM cannot run."""

import json
from pathlib import Path

import pytest
from conftest import cli

from app.config.schema import AppConfig
from app.errors import UserError
from app.serve.vllm_engine import check_vllm, max_lora_rank, vllm_command


def _run(root: Path, r: int = 12, **model) -> Path:
    run = root / "my-run"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": r, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}))
    cfg = AppConfig.model_validate({"method": "grpo", "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", **model},
                                    "data": {"dataset": "arith"}})
    (run / "config.yaml").write_text(cfg.to_yaml())
    return run


def test_the_command_serves_the_adapter_and_its_base_under_the_builtin_servers_names(tmp_path):
    argv, env, names = vllm_command(_run(tmp_path), "127.0.0.1", 8001, key="s3cret")
    assert names == {"my-run": "adapter", "my-run-base": "base"}
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    opt = {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}
    assert opt["--model"] == "Qwen/Qwen2.5-0.5B-Instruct" and opt["--served-model-name"] == "my-run-base"
    assert opt["--lora-modules"] == f"my-run={tmp_path / 'my-run' / 'adapter'}"
    assert opt["--max-lora-rank"] == "16"  # r 12 -> the smallest rank vLLM takes that holds it
    assert opt["--quantization"] == "bitsandbytes" and "--enable-lora" in argv  # 4-bit, as trained
    assert opt["--port"] == "8001" and opt["--host"] == "127.0.0.1"
    assert env == {"VLLM_API_KEY": "s3cret"} and "s3cret" not in " ".join(argv)
    # a 16-bit run, a named chat template, a revision
    argv2, env2, _ = vllm_command(_run(tmp_path / "b", r=64, load_in_4bit=False, chat_template="qwen3",
                                       revision="abc123"), "0.0.0.0", 8000, key=None)
    opt2 = {a: b for a, b in zip(argv2, argv2[1:]) if a.startswith("--")}
    assert "--quantization" not in argv2 and opt2["--max-lora-rank"] == "64" and env2 == {}
    assert opt2["--chat-template"].endswith("qwen3.jinja") and Path(opt2["--chat-template"]).is_file()
    assert opt2["--revision"] == "abc123"


def test_where_vllm_cannot_run_it_is_one_line():
    assert max_lora_rank(320) == 320 and max_lora_rank(1) == 8
    with pytest.raises(UserError, match="above the 512 vLLM serves"):
        max_lora_rank(600)
    with pytest.raises(UserError, match="no CUDA GPU"):
        check_vllm(cuda=False, has_vllm=True)
    with pytest.raises(UserError, match=r"no vllm \(pip install vllm\)"):
        check_vllm(cuda=True, has_vllm=False)
    check_vllm(cuda=True, has_vllm=True)


def test_the_cli_refuses_vllm_on_a_machine_without_cuda(tmp_path):
    import torch

    from app.host.machine import installed

    if torch.cuda.is_available() and installed("vllm"):
        pytest.skip("vLLM can run here: the command would start it")
    r = cli("serve", str(_run(tmp_path)), "--engine", "vllm", timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--engine vllm needs a CUDA GPU" in " ".join(r.stderr.split())
