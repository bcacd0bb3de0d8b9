"""A real llama.cpp (llama-cpp-python) as the GGUF tests and bench/bench_gguf.py drive it: a file opened without its
notes on stderr, greedy tokens after given ids, and the logits at each of given ids."""

from pathlib import Path


def open_gguf(path: Path, **kw):
    import llama_cpp

    from app.export.gguf import native_stderr

    with native_stderr():  # llama.cpp's context notes, printed even with verbose=False
        return llama_cpp.Llama(model_path=str(path), n_threads=2, verbose=False, **{"n_ctx": 256, **kw})


def greedy(llm, ids: list[int], most: int = 32) -> list[int]:
    """llama.cpp's greedy tokens after ``ids``, up to the end-of-sequence token or ``most``."""
    out = []
    for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
        if t == llm.token_eos() or len(out) >= most:
            break
        out.append(t)
    return out


def scores(path: Path, ids: list[int], **kw):
    """llama.cpp's logits at each position of ``ids`` (a numpy array, a row per id); ``kw``: open_gguf's (lora_path)."""
    import numpy as np

    llm = open_gguf(path, n_ctx=128, logits_all=True, **kw)
    try:
        llm.reset()
        llm.eval(ids)
        return np.array(llm.scores[:len(ids)])
    finally:
        llm.close()
