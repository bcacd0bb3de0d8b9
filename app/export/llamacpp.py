"""Running a GGUF in llama.cpp (llama-cpp-python) where its death cannot take the caller with it: each run in a child
process of its own, a child killed by a signal read as one line that names the cause (``LlamaCppDied``), and the way
llama.cpp runs quantized files on this CPU found once by a probe (``probe``).

Why a probe: some cloud VMs advertise AMX but fault on it, and llama.cpp's CPU backend repacks quantized weights
(Q4_K_M, Q8_0, ...) into "extra" buffer types whose kernels use it: every quantized file dies with SIGILL there while
f16 runs. Loading with ``use_extra_bufts=False`` keeps the plain CPU buffers and avoids the faulting path. The probe
writes a small quantized file (a one-layer model of the shipped tokenizer, wide enough for the repacked kernels),
loads it and evaluates one token in a child: as llama.cpp defaults, else with the plain buffers. Its finding is kept
per machine and llama-cpp-python version (``~/.cache/qlora-app/llamacpp-probe.json``), read by ``open_gguf``, said
by ``qlora-app doctor``.

Owns: the probe, the child runner, opening a GGUF for inference. Must not convert or quantize (gguf.py,
quantize.py). llama_cpp is imported in the functions (and the children) only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from app.config.builtin import builtin_model_path
from app.errors import UserError
from app.export.gguf import convert, native_stderr, pre_tokenizer
from app.host.loading import llama_plain_buffers

PROBE_TIMEOUT_S = 120
log = logging.getLogger("qlora_app")
MODES = {
    "default": "llama.cpp runs quantized GGUF files here",
    "plain": "this CPU faults on llama.cpp's repacked CPU kernels (it advertises AMX but faults on it, as some cloud "
             "VMs do): quantized GGUF files run here with use_extra_bufts=False (the plain CPU buffers)",
    "broken": "llama.cpp dies on quantized GGUF files here, with and without its repacked CPU kernels: export "
              "--outtype f16 runs, or run the quantized file on another machine",
    "missing": "llama-cpp-python is not installed",
}


class LlamaCppDied(UserError):
    """llama.cpp's child process died (a signal, or an exit without its answer): one line naming the cause."""


@dataclass(frozen=True)
class Probe:
    mode: str  # a key of MODES
    detail: str = ""  # what the failing tries died of

    @property
    def line(self) -> str:
        return MODES[self.mode] + (f" ({self.detail})" if self.detail else "")

    @property
    def plain(self) -> bool:
        return self.mode == "plain"


def death_line(code: int | None, what: str) -> str:
    """How a child that ran llama.cpp ended, in words: a signal by its name (SIGILL: an instruction this CPU faults
    on; SIGKILL: most often out of memory), or its exit code."""
    if code is not None and code < 0:
        sig = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        why = {"SIGILL": "an illegal instruction: this CPU advertises instructions it faults on (AMX on some cloud "
                         "VMs); `qlora-app doctor` checks how llama.cpp runs here",
               "SIGKILL": "killed, most often for memory: a smaller --outtype or a larger machine",
               "SIGSEGV": "a crash inside llama.cpp (a corrupt or unsupported file)"}.get(sig, "killed by a signal")
        return f"llama.cpp died {what} ({sig}: {why})"
    return f"llama.cpp exited {what} without an answer (exit code {code})"


_CHILD = ("import pickle, sys; sys.path[:0] = pickle.load(sys.stdin.buffer); "
          "from app.export.llamacpp import _child_main; _child_main()")


def _child_main() -> None:
    """The child's side of ``in_child``: read the call, run it, write its result (or its error) to the file named."""
    import pickle
    import sys

    fn, args, kwargs, out = pickle.load(sys.stdin.buffer)
    try:
        result = ("ok", fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - said in the parent, one line
        result = ("error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    Path(out).write_bytes(pickle.dumps(result))


def in_child(fn, *args, what: str = "running a GGUF file", timeout: float = 600, **kwargs):
    """``fn(*args, **kwargs)`` (a module-level function, its arguments and result picklable) in a fresh Python
    process: its result, or LlamaCppDied naming how the child ended (a signal, a timeout, an error raised there).
    The child's own output (llama.cpp's notes) is kept out of the caller's terminal."""
    import pickle
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.pickle"
        payload = pickle.dumps(list(sys.path)) + pickle.dumps((fn, args, kwargs, str(out)))
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD], input=payload, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise LlamaCppDied(f"llama.cpp took longer than {timeout:g} s {what}; it was stopped") from None
        if not out.is_file():
            raise LlamaCppDied(death_line(proc.returncode, what))
        status, value = pickle.loads(out.read_bytes())
    if status == "error":
        raise LlamaCppDied(f"llama.cpp failed {what} ({value})")
    return value


def open_gguf(path: Path, plain: bool | None = None, **kw):
    """A llama_cpp.Llama on ``path`` (quiet), the way llama.cpp runs on this CPU (``plain``: the plain CPU buffers;
    None: as the probe found). Call it inside ``in_child``: a CPU fault then ends the child, not the caller."""
    import llama_cpp

    use_plain = probe().plain if plain is None else plain
    if use_plain and plain is None and not _SAID:  # said once a process: this machine runs llama.cpp another way
        _SAID.append(True)
        log.warning("note: %s", probe().line)
    with native_stderr(), llama_plain_buffers(use_plain):  # llama.cpp's notes, printed even with verbose=False
        return llama_cpp.Llama(model_path=str(path), verbose=False, **{"n_ctx": 256, "n_threads": 2, **kw})


def _one_token(path: str, plain: bool) -> int:
    """A probe's child: load ``path`` and evaluate one token."""
    llm = open_gguf(Path(path), plain=plain, n_ctx=32)
    try:
        llm.eval([1])
        return int(len(llm.scores[0]))
    finally:
        llm.close()


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "qlora-app" / "llamacpp-probe.json"


def _machine_key() -> str:
    """This CPU's flags and the llama-cpp-python version: what the probe's finding depends on."""
    import importlib.metadata as md

    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")),
                     "")
    except OSError:
        flags = platform.processor()
    try:
        version = md.version("llama_cpp_python")
    except md.PackageNotFoundError:
        version = "none"
    return hashlib.sha256(f"{flags}|{version}|{platform.machine()}".encode()).hexdigest()[:16]


_FOUND: dict[str, Probe] = {}
_SAID: list = []


def probe(runner=_one_token, probe_file: Path | None = None, cache: bool = True) -> Probe:
    """How llama.cpp runs quantized files here (a child per try: as it defaults, then with the plain CPU buffers),
    found once per machine and version. ``runner(path, plain)``: what a child does (a test injects a fault)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return Probe("missing")
    key = _machine_key()
    if cache and key in _FOUND:
        return _FOUND[key]
    stored = _cache_file()
    if cache:
        try:
            found = json.loads(stored.read_text()).get(key)
            if found:
                return _FOUND.setdefault(key, Probe(**found))
        except (OSError, ValueError, TypeError):
            pass
    path = probe_file or probe_gguf()
    died = []
    for plain in (False, True):
        try:
            in_child(runner, str(path), plain, what="on one token of a quantized file", timeout=PROBE_TIMEOUT_S)
            result = Probe("plain" if plain else "default", "; ".join(died))
            break
        except LlamaCppDied as e:
            died.append(str(e).removeprefix("llama.cpp ").split(" (", 1)[0] + _signal_of(str(e)))
    else:
        result = Probe("broken", "; ".join(died))
    if cache:
        _FOUND[key] = result
        try:
            stored.parent.mkdir(parents=True, exist_ok=True)
            old = json.loads(stored.read_text()) if stored.is_file() else {}
            stored.write_text(json.dumps({**old, key: asdict(result)}))
        except (OSError, ValueError):
            pass
    return result


def _signal_of(line: str) -> str:
    found = re.search(r"\bSIG[A-Z]+\b", line)
    return f" ({found.group(0)})" if found else ""


def probe_gguf() -> Path:
    """A small Q8_0 GGUF for the probe (kept in the cache folder): one layer of 256 wide (rows the repacked kernels
    take), random weights, the shipped base model's tokenizer."""
    out = _cache_file().with_name("probe-q8_0.gguf")
    if out.is_file():
        return out
    import shutil
    import tempfile

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    src = builtin_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = AutoConfig.from_pretrained(src)
        cfg.update({"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "head_dim": 64})
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp)
        for f in Path(src).iterdir():
            if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "generation_config.json"):
                shutil.copy(f, tmp)
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(out.name + ".part")
        convert(Path(tmp), part, "q8_0", pre_tokenizer(Path(tmp)), "qlora-app-probe")
        part.replace(out)
    return out
