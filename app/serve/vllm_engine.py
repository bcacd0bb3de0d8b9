"""`qlora-app serve RUN --engine vllm`: the run's base and its adapter behind vLLM's own OpenAI-compatible server, for
throughput on a CUDA GPU (continuous batching, paged attention) where the built-in server answers one request at a
time.

The same two model names as the built-in server: the run's name is the adapter (vLLM's ``--lora-modules``), the run's
name + "-base" is the base (``--served-model-name``). The base is loaded as the run trained it: 4-bit through vLLM's
bitsandbytes loader when ``model.load_in_4bit``, the same revision, the same chat template (a TRL template named by
``model.chat_template`` is passed as a file). The key travels in vLLM's own ``VLLM_API_KEY`` variable, never on the
command line (where other users of the machine could read it). vLLM does not add the run's system prompt: a client
sends it (the start line says so).

Only the command is decided here (tested on any machine); it runs only where CUDA and vllm are there. Standard library
only at import.
"""

from __future__ import annotations

import os
import subprocess
import sys

from app.errors import UserError
from app.host.machine import installed
from app.host.offline import hub_offline
from app.model.pair import find_target
from app.model.templates import template_file
from app.run import lookup
from app.serve.engine import served_names

LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's --max-lora-rank takes
KEY_VAR = "VLLM_API_KEY"


def check_vllm(cuda: bool, has_vllm: bool) -> None:
    if not cuda or not has_vllm:
        missing = "CUDA GPU" if not cuda else "vllm (pip install vllm)"
        raise UserError(f"--engine vllm needs a CUDA GPU and vllm installed, and this machine has no {missing}; drop "
                        "--engine (the built-in server answers on a CPU or a GPU)")


def max_lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts that holds the adapter's ``r``."""
    for allowed in LORA_RANKS:
        if r <= allowed:
            return allowed
    raise UserError(f"the adapter's LoRA rank {r} is above the {LORA_RANKS[-1]} vLLM serves; use the built-in server "
                    "(drop --engine vllm)")


def vllm_command(run, host: str, port: int, key: str | None, model: str | None = None,
                 gpu_memory_utilization: float | None = None) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(argv, environment additions, {model name: side}) for vLLM's OpenAI-compatible server on this run."""
    target = find_target(run, model)
    adapter_dir, mc = target.adapter_dir, target.base
    names = served_names(adapter_dir)
    adapter, base = (next(n for n, side in names.items() if side == s) for s in ("adapter", "base"))
    r = lookup.adapter_config(adapter_dir).get("r") or 16
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(mc.name_or_path),
            "--served-model-name", base, "--enable-lora", "--lora-modules", f"{adapter}={adapter_dir}",
            "--max-lora-rank", str(max_lora_rank(int(r))), "--host", host, "--port", str(port)]
    if mc.load_in_4bit:
        argv += ["--quantization", "bitsandbytes"]
    if mc.revision:
        argv += ["--revision", mc.revision]
    if mc.trust_remote_code:
        argv += ["--trust-remote-code"]
    if mc.chat_template:
        argv += ["--chat-template", str(template_file(mc.chat_template))]
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    return argv, ({KEY_VAR: key} if key else {}), names


def serve_with_vllm(run, host: str, port: int, key: str | None, model: str | None = None, say=print) -> int:
    """Start vLLM's server on the run (after the checks) and wait for it; its exit code."""
    check_vllm(_cuda(), installed("vllm"))
    argv, env, names = vllm_command(run, host, port, key, model)
    adapter = next(n for n, side in names.items() if side == "adapter")
    say(f"vLLM serving {adapter} (the adapter) and {adapter}-base (its base) on http://{host}:{port}/v1"
        + (" (offline: the base from the local cache)" if hub_offline() else "")
        + "; vLLM does not add the run's system prompt: send it as the first message")
    return subprocess.call(argv, env={**os.environ, **env})


def _cuda() -> bool:
    import torch  # heavy: only to start vLLM

    return torch.cuda.is_available()
