"""GGUF types: size and agreement with the f16 file in a real llama.cpp, for Q4_K_M and Q8_0 (docs/export.md).

    python bench/bench_gguf.py [--seed 7] [--types q4_k_m,q8_0]

Two models, each exported once with `export --outtype f16,<types>` (one merge):
  - the demo's trained run (`qlora-app demo --quick --seed S`, the shipped tiny model: rows 64 and 128 values wide,
    too narrow for a k-quant, so llama.cpp falls back as it decides), greedy on the run's held-out problems: the share
    of answers identical to the f16 file's, and each file's accuracy under the run's reference match;
  - a wider tiny Qwen2 (hidden 256, intermediate 512, random weights and adapter: every matrix takes a real k-quant):
    next-token agreement with the f16 file and the mean cosine of the logits over 55 positions.
Prints Markdown tables. Offline; CPU; about 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[k] = "1"
from llamacpp import greedy_answers, scores as llama_scores  # noqa: E402 - tests/ is on the path above


def files_of(res, types):
    return {t: res.out / res.files["gguf" if t == "f16" else f"gguf-{t}"] for t in ["f16", *types]}


def demo_rows(root: Path, seed: int, types: list[str]) -> list[str]:
    from transformers import AutoTokenizer

    from app.demo.recipe import base_model_path
    from app.export.bundle import export_run
    from app.model.generation import format_prompt
    from app.rewards import match
    from app.run import layout

    out = root / "demo"
    subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--seed", str(seed), "--output-dir",
                    str(out)], check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    run = next(p for p in out.iterdir() if (p / layout.COMPARE_JSON).is_file())
    cmp = json.loads((run / layout.COMPARE_JSON).read_text())
    res = export_run(run, root / "demo-gguf", fmt="gguf", outtype=",".join(["f16", *types]))
    tok = AutoTokenizer.from_pretrained(base_model_path())
    system = cmp["config"]["system_prompt"]
    prompts = [tok(format_prompt(tok, {"messages": [{"role": "system", "content": system},
                                                    {"role": "user", "content": r["prompt"]}], "plain": ""}),
                   add_special_tokens=False)["input_ids"] for r in cmp["rows"]]
    answers, rows = {}, []
    for t, f in files_of(res, types).items():  # each file in a llama.cpp child of its own
        answers[t] = [tok.decode(a, skip_special_tokens=True) for a in greedy_answers(f, prompts)]
        right = sum(bool(match.correct(None, a, r["reference"])) for a, r in zip(answers[t], cmp["rows"]))
        same = sum(a == b for a, b in zip(answers[t], answers["f16"]))
        rows.append(f"| demo (seed {seed}) | {t} | {f.stat().st_size / 1e6:.2f} MB | {same}/{len(prompts)} | "
                    f"{right}/{len(prompts)} ({right / len(prompts):.0%}) |")
    return rows


def wide_rows(root: Path, types: list[str]) -> list[str]:
    import numpy as np
    import tiny
    from fakes import make_adapter

    from app.export.bundle import export_run
    from app.export.quantize import tensor_types

    tiny.build_tokenizer(root / "tok")
    base = tiny.build_from_config("qwen2", root / "wide", root / "tok", hidden_size=256, intermediate_size=512,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=512, tie_word_embeddings=False)
    res = export_run(make_adapter(base, root / "wide-adapter"), root / "wide-gguf", fmt="gguf",
                     outtype=",".join(["f16", *types]))
    ids = list(range(5, 60))
    scores, rows = {}, []
    for t, f in files_of(res, types).items():
        scores[t] = llama_scores(f, ids)
        agree = float((scores[t].argmax(-1) == scores["f16"].argmax(-1)).mean())
        cos = float(np.mean([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(scores[t], scores["f16"])]))
        mix = ", ".join(f"{n} {k}" for k, n in tensor_types(f).most_common())
        rows.append(f"| wide random | {t} | {f.stat().st_size / 1e6:.2f} MB | {agree:.0%} | {cos:.4f} | {mix} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--types", default="q4_k_m,q8_0")
    a = ap.parse_args()
    types = [t for t in a.types.split(",") if t != "f16"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("| model | type | size | same greedy answer as f16 | accuracy |\n|---|---|---|---|---|")
        print("\n".join(demo_rows(root, a.seed, types)))
        print("\n| model | type | size | next token as f16 | logits cosine | weight matrices |")
        print("|---|---|---|---|---|---|")
        print("\n".join(wide_rows(root, types)))


if __name__ == "__main__":
    main()
