"""A GGUF at the size the card runs: llama.cpp's own quantizer (``llama_model_quantize``, through llama-cpp-python,
in this process) turns the converter's f16 file into Q4_K_M (the default: what Ollama and LM Studio users run) or any
k-quant, Q8_0 or a legacy quant.

The converter writes f16 / bf16 / q8_0 / f32 itself (app/export/gguf.py); every other type is quantized from its f16
file. A tensor whose rows cannot take the k-quant (llama.cpp's k-quants work in blocks of 256 values per row) falls
back to the type llama.cpp picks for it; ``tensor_types`` reads the written file, so the export says how many did.
A quantization that fails is one line, and the f16 file is kept.

Owns the export's GGUF types and the quantizer call. Must not convert (app/export/gguf.py) nor merge.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from app.errors import UserError
from app.export.gguf import native_stderr

CONVERTER_TYPES = ("f16", "bf16", "q8_0", "f32")  # written by llama.cpp's converter itself
QUANTIZER_TYPES = ("q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q6_k", "q3_k_m", "q3_k_s", "q3_k_l", "q2_k",
                   "q4_0", "q4_1", "q5_0", "q5_1")  # quantized from the f16 file by llama.cpp's quantizer
OUTTYPES = (*QUANTIZER_TYPES[:5], "q8_0", "f16", "bf16", "f32", *QUANTIZER_TYPES[5:])
DEFAULT = "q4_k_m"
SOURCE = "f16"  # what the quantizer reads
QUANTIZER = "pip install 'qlora-app[gguf]' (llama-cpp-python: llama.cpp's quantizer), or --outtype f16"
# llama.cpp's own count of the tensors whose rows could not take the type it chose (k-quants: 256 values a block)
FALLBACK = re.compile(r"(\d+) of \d+ tensor\(s\) required fallback quantization")


def parse_outtypes(text: str) -> list[str]:
    """``--outtype``: one type or several, comma-separated ("q4_k_m,q8_0"), any case; the first is the file the
    Modelfile and the card use. An unknown type is one line with the list."""
    asked = [t.strip().lower() for t in (text or "").split(",") if t.strip()]
    bad = [t for t in asked if t not in OUTTYPES]
    if bad or not asked:
        raise UserError(f"--outtype {text} is not one of {', '.join(OUTTYPES)} ({DEFAULT} is the default; several "
                        "at once: q4_k_m,q8_0)")
    return list(dict.fromkeys(asked))


def needs_quantizer(outtypes: list[str]) -> bool:
    return any(t not in CONVERTER_TYPES for t in outtypes)


def check_quantizer(outtypes: list[str]) -> None:
    """One line before anything loads when a type needs llama.cpp's quantizer and it is not installed."""
    if not needs_quantizer(outtypes):
        return
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        first = next(t for t in outtypes if t not in CONVERTER_TYPES)
        raise UserError(f"--outtype {first} needs llama.cpp's quantizer, which is not installed; {QUANTIZER}") from None


def quantize(src: Path, dst: Path, outtype: str, threads: int | None = None) -> int:
    """``dst``: ``src`` (an f16 GGUF) quantized to ``outtype`` by llama.cpp (its own rules for which tensors take
    which type: Q4_K_M keeps half of the attention values and feed-forward down projections in Q6_K, for example).
    Returns how many tensors llama.cpp says fell back to another type. A failure is one line (the caller keeps
    ``src``)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{outtype.upper()}")
    params.nthread = threads or os.cpu_count() or 1
    log = dst.with_name(dst.name + ".log")
    try:
        with native_stderr(log):  # a line per tensor, and the fallback count read below
            rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
        said = log.read_text(errors="replace")
    finally:
        log.unlink(missing_ok=True)
    if rc != 0 or not dst.is_file():
        dst.unlink(missing_ok=True)
        last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "no message")
        raise UserError(f"llama.cpp could not quantize the GGUF to {outtype} ({last[:200]}); the {SOURCE} file is "
                        f"kept: {src.name}")
    found = FALLBACK.search(said)
    return int(found.group(1)) if found else 0


def tensor_types(path: Path) -> Counter:
    """{GGML type name: tensors} of the weight matrices (2 or more dimensions) in a GGUF file."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return Counter(t.tensor_type.name for t in reader.tensors if len([d for d in t.shape if d > 1]) >= 2)


