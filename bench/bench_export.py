"""Peak memory and time of `qlora-app export --format gguf` on random-weight models of Qwen2.5-0.5B and -1.5B shape.

    python bench/bench_export.py [--shapes 0.5b,1.5b] [--out DIR]

Builds each model with ../shared/gpu/bench_model.py (bf16, a 32k BPE tokenizer trained on GSM8K; skipped when the
GSM8K file is absent), gives it a random LoRA adapter on all linear layers (r 16, B non-zero so the merge does
work), then runs the real CLI in a child process and reads its peak RSS (ru_maxrss of the child) and wall time.
The target: peak RSS <= 1.5x the 16-bit model's size (the export never holds two 16-bit copies). Rewrites the
`## export to GGUF` section of docs/performance.md. CPU, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder

SHARED = ROOT.parent / "shared"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TQDM_DISABLE": "1"}


def make_adapter(model_dir: Path, out: Path) -> None:
    code = f"""
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained({str(model_dir)!r}, dtype=torch.bfloat16)
p = get_peft_model(m, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
for n, w in p.named_parameters():
    if "lora_B" in n:
        torch.nn.init.normal_(w, std=0.01)
p.save_pretrained({str(out)!r})
"""
    subprocess.run([sys.executable, "-c", code], check=True, env=ENV)


def measure(adapter: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in GiB of the export process, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.time()
    subprocess.run([sys.executable, "-m", "app.cli", "export", str(adapter), "--out", str(out), "--format", "gguf",
                    "--local-only"], check=True, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.time() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak >= before, "a child's peak is at least the largest so far; run one shape per process to be exact"
    return peak / 2**20, wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="0.5b,1.5b")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    data = SHARED / "data" / "gsm8k_train.jsonl"
    if not data.is_file():
        print(f"skipped: {data} not found (bench_model.py trains its tokenizer on it)")
        return 0
    work = Path(args.out or tempfile.mkdtemp(prefix="bench-export-"))
    rows = []
    for shape in [s.strip() for s in args.shapes.split(",") if s.strip()]:
        model = work / f"qwen-{shape}"
        if not (model / "config.json").is_file():
            subprocess.run([sys.executable, str(SHARED / "gpu" / "bench_model.py"), str(model), shape, str(data)],
                           check=True, env=ENV, stdout=subprocess.DEVNULL)
        adapter = work / f"adapter-{shape}"
        if not (adapter / "adapter_config.json").is_file():
            make_adapter(model, adapter)
        size = sum(p.stat().st_size for p in model.glob("*.safetensors")) / 2**30
        # one shape per child process: ru_maxrss of children is the largest child so far
        code = (f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); from bench_export import measure; "
                f"from pathlib import Path; import json; print(json.dumps(measure(Path({str(adapter)!r}), "
                f"Path({str(work / ('gguf-' + shape))!r}))))")
        base_code = ("import resource, app.export.bundle, torch, transformers, peft, conversion; "
                     "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        libs = int(subprocess.run([sys.executable, "-c", base_code], check=True, env=ENV, cwd=ROOT, capture_output=True,
                                  text=True).stdout.split()[-1]) / 2**20
        peak, wall = json.loads(subprocess.run([sys.executable, "-c", code], check=True, env=ENV, cwd=ROOT,
                                               capture_output=True, text=True).stdout.strip().splitlines()[-1])
        gguf = next((work / f"gguf-{shape}").glob("*.gguf"))
        rows.append((shape, size, peak, libs, wall, gguf.stat().st_size / 2**30))
        print(f"{shape}: 16-bit model {size:.2f} GiB, peak RSS {peak:.2f} GiB ({peak / size:.2f}x; libraries "
              f"{libs:.2f} GiB), {wall:.0f} s")
    body = [f"Measured {time.strftime('%Y-%m-%d')} on this machine (2 CPU cores) by `python bench/bench_export.py`: "
            "`qlora-app export ADAPTER --format gguf` (f16) on random-weight models of Qwen2.5 shape (bf16 on disk) "
            "with a random all-linear LoRA adapter (r 16). Peak RSS is the export process's own (ru_maxrss); the "
            "target is at most 1.5x the 16-bit model (one 16-bit copy in memory, the converter streaming tensors). "
            "`libraries` is the RSS of a process that only imports torch, transformers, peft and the converter: "
            "what any export pays before it reads a weight; `model part` is the peak above it.",
            "", "| shape | 16-bit model | peak RSS | ratio | libraries | model part | wall | .gguf |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, size, peak, libs, wall, g in rows:
        body.append(f"| Qwen2.5-{shape.upper()} | {size:.2f} GiB | {peak:.2f} GiB | {peak / size:.2f}x | "
                    f"{libs:.2f} GiB | {(peak - libs) / size:.2f}x | {wall:.0f} s | {g:.2f} GiB |")
    write_section("export to GGUF", "\n".join(body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
