"""A real llama.cpp (llama-cpp-python) as the GGUF tests and bench/bench_gguf.py drive it. What runs a quantized file
runs in a child process of its own (app/export/llamacpp.in_child): on a CPU that faults in llama.cpp, one failed test
naming the cause, never the end of pytest; each file opened the way llama.cpp runs on this CPU (the probe's)."""

from pathlib import Path

from app.export.llamacpp import in_child, open_gguf

__all__ = ["greedy", "greedy_answers", "open_gguf", "scores"]


def greedy(llm, ids: list[int], most: int = 32) -> list[int]:
    """llama.cpp's greedy tokens after ``ids``, up to the end-of-sequence token or ``most``."""
    out = []
    for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
        if t == llm.token_eos() or len(out) >= most:
            break
        out.append(t)
    return out


def _greedy_all(path: str, prompts: list[list[int]], most: int) -> list[list[int]]:
    llm = open_gguf(Path(path))
    try:
        return [greedy(llm, ids, most) for ids in prompts]
    finally:
        llm.close()


def greedy_answers(path: Path, prompts: list[list[int]], most: int = 32) -> list[list[int]]:
    """llama.cpp's greedy tokens after each of ``prompts`` (token ids), in a child process."""
    return in_child(_greedy_all, str(path), prompts, most, what=f"answering with {Path(path).name}")


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
