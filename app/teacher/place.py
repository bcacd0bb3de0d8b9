"""Where a teacher outside the training process runs and what it takes (``Outside``): an endpoint is an address;
a GGUF file's own header (``gguf_facts``: layers, trained context, widths, vocabulary; no weight read) sizes the
llama.cpp child against this machine: the file's layers not offloaded, its KV cache and every position's logits in
RAM, the offloaded layers on the card. ``plan_outside`` decides its threads and context and refuses, in one line, a
teacher that cannot fit; the plan (app/train/planning/teacher.py) records it, and the proof of a run without its
record (an adapter folder alone) sizes it here again.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from app.errors import UserError
from app.model.teacher import TeacherSource

GB = 2**30


@dataclass(frozen=True)
class Outside:
    """Where a teacher outside the training process runs: ``kind`` gguf (llama.cpp in a child process of this
    machine) or endpoint (a server elsewhere); a GGUF's file size, layers, context, threads, offloaded layers and
    the RAM it takes against what this machine has free; ``tokens_per_s`` what the probe measured."""

    kind: str
    given: str
    top_k: int
    timeout: float
    model: str | None = None  # an endpoint's model name (None: the first it lists)
    threads: int = 0
    context: int = 0
    gpu_layers: int = 0
    file_gb: float = 0.0
    layers: int | None = None
    ram_gb: float = 0.0  # what the child holds in RAM: the file's layers not offloaded, its KV cache and logits
    card_gb: float = 0.0  # the layers offloaded to the card
    free_ram_gb: float | None = None
    tokens_per_s: float | None = None

    def record(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        if self.kind == "endpoint":
            speed = f", {self.tokens_per_s:,.0f} tokens/s scored in the probe" if self.tokens_per_s else ""
            model = f" (model {self.model})" if self.model else ""
            return (f"{self.given}{model}, an OpenAI-compatible endpoint (never in training memory): its "
                    f"top-{self.top_k} log-probabilities per answer token{speed}")
        offload = (f"{self.gpu_layers if self.gpu_layers >= 0 else 'all'} of {self.layers or '?'} layers on the "
                   f"card ({self.card_gb:.2f} GB beside the student)" if self.gpu_layers else "none on the card")
        free = f" of {self.free_ram_gb:.1f} GB free" if self.free_ram_gb is not None else ""
        speed = f"; {self.tokens_per_s:,.0f} tokens/s scored in the probe" if self.tokens_per_s else ""
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        return (f"{Path(self.given).name} in llama.cpp, a child process (never in training memory): a "
                f"{_size(self.file_gb)} file, {_size(self.ram_gb)} of RAM{free} with a {self.context}-token context, "
                f"{threads}, {offload}; its top-{self.top_k} log-probabilities per answer token{speed}")


def gguf_facts(path: str) -> dict:
    """A GGUF file's own facts from its header (no weights read): layers, trained context, widths, vocabulary.
    A file that is no GGUF (or a torn one) is one line."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        fields = {k: f.contents() for k, f in reader.fields.items()
                  if not k.startswith("tokenizer.ggml.") or k in ("tokenizer.ggml.bos_token_id",)}
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in reader.fields else None
    except Exception as e:  # noqa: BLE001 - a torn or foreign file fails in many ways inside the reader
        raise UserError(f"teacher file '{path}' is not a readable GGUF ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:160] if str(e) else 'unreadable'}); export it again (qlora-app "
                        "export --format gguf) or pass another --teacher") from None
    arch = fields.get("general.architecture") or ""
    get = lambda key: fields.get(f"{arch}.{key}")  # noqa: E731
    return {"arch": arch, "layers": get("block_count"), "context": get("context_length"),
            "hidden": get("embedding_length"), "heads": get("attention.head_count"),
            "kv_heads": get("attention.head_count_kv") or get("attention.head_count"),
            "head_dim": get("attention.key_length"), "vocab": vocab}


def plan_outside(cfg, source: TeacherSource, free_ram_gb: float | None = None) -> Outside:
    """Where ``source`` (a .gguf or an endpoint) runs and what it takes; a GGUF that cannot fit in this machine's
    free RAM plus the layers it offloads is one line. ``free_ram_gb``: as measured here (None: read now)."""
    d = cfg.distill
    if d.temperature != 1.0:
        raise UserError(f"distill.temperature={d.temperature:g} with a GGUF or endpoint teacher: its log-"
                        "probabilities come at temperature 1, so the loss compares both at 1; set "
                        "distill.temperature=1")
    if source.outside == "endpoint":
        return Outside("endpoint", source.given, d.top_k, d.teacher_timeout, d.teacher_model)
    if cfg.runtime.num_processes * cfg.runtime.nnodes > 1:
        raise UserError(f"a GGUF teacher runs in one llama.cpp child beside one training process, and this run has "
                        f"{cfg.runtime.num_processes * cfg.runtime.nnodes} (each would load the file): serve it once "
                        "(llama.cpp's llama-server, or vLLM) and pass its http://host:port/v1 as --teacher")
    facts = gguf_facts(source.given)
    file_gb = Path(source.given).stat().st_size / GB
    layers = facts["layers"]
    own = facts["context"] or 4096
    context = d.teacher_context or min(own, _round_up(cfg.training.max_length + d.max_completion_length, 256))
    threads = d.teacher_threads or max(1, (os.cpu_count() or 2) // 2)
    offloaded = (layers or 0) if d.teacher_gpu_layers < 0 else min(d.teacher_gpu_layers, layers or 0)
    share = offloaded / layers if layers else 0.0
    kv = 2 * (layers or 0) * context * (facts["kv_heads"] or 0) * (facts["head_dim"] or _div(facts["hidden"],
                                                                                           facts["heads"])) * 2
    logits = context * (facts["vocab"] or 0) * 4  # every position's logits (it scores whole answers)
    ram = file_gb * (1 - share) + (kv + logits) / GB
    free = _free_ram_gb() if free_ram_gb is None else free_ram_gb
    out = Outside("gguf", source.given, d.top_k, d.teacher_timeout, None, threads, context, d.teacher_gpu_layers,
                  file_gb, layers, ram, file_gb * share, free)
    if free is not None and ram > free:
        more = (f"offload layers to the GPU (distill.teacher_gpu_layers, {layers} in all)" if layers and
                offloaded < layers else "a smaller quantization of the teacher")
        raise UserError(f"teacher {Path(source.given).name} needs {ram:.1f} GB of RAM ({file_gb:.1f} GB file less "
                        f"{offloaded} offloaded layers, plus a {context}-token context) and this machine has "
                        f"{free:.1f} GB free; {more}, a shorter distill.teacher_context, or an endpoint teacher "
                        "on another machine")
    return out


def _size(gb: float) -> str:
    return f"{gb:.2f} GB" if gb >= 0.1 else f"{gb * 1024:.1f} MB"


def _round_up(n: int, step: int) -> int:
    return -(-int(n) // step) * step


def _div(a, b) -> int:
    return int(a) // int(b) if a and b else 0


def _free_ram_gb() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().available / GB
    except (ImportError, OSError):
        return None
