"""A real llama.cpp (llama-cpp-python) as the GGUF tests and bench/bench_gguf.py drive it. What runs a quantized file
runs in a child process of its own (app/export/llamacpp.in_child): on a CPU that faults in llama.cpp, one failed test
naming the cause, never the end of pytest; each file opened the way llama.cpp runs on this CPU (the probe's)."""

from pathlib import Path

from app.export.llamacpp import in_child, open_gguf
from app.export.measure import greedy, greedy_answers  # what an export measures of its GGUF files, the same way

__all__ = ["greedy", "greedy_answers", "open_gguf", "scores"]


def _scores(path: str, ids: list[int], kw: dict):
    import numpy as np

    llm = open_gguf(Path(path), n_ctx=128, logits_all=True, **kw)
    try:
        llm.reset()
        llm.eval(ids)
        return np.array(llm.scores[:len(ids)])
    finally:
        llm.close()


def scores(path: Path, ids: list[int], **kw):
    """llama.cpp's logits at each position of ``ids`` (a numpy array, a row per id), in a child process; ``kw``:
    open_gguf's (lora_path)."""
    return in_child(_scores, str(path), ids, kw, what=f"scoring with {Path(path).name}")
