"""what you ship is what you measured: a merged export's greedy answers against its adapter's (the run's proof) on
the proof's held-out rows, merged onto the base's own weights ("original") and onto the weights the adapter was
trained on (the NF4 base dequantized, "trained"), in bf16 and fp32.

    python bench/bench_merge.py RUN [RUN ...]

Per run: the proof's rows (RUN/compare.json: the adapter's greedy answers on the 4-bit base) asked again of each
merged model, as the proof asked them (app/eval/compare.collect_prompts, the run's seed); the answers that are the
same text, and each merged model's accuracy by the run's reward. Rewrites the `## merged exports against the adapter`
section of docs/performance.md. CPU, offline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
VARIANTS = (("original", "bf16"), ("trained", "bf16"), ("original", "fp32"), ("trained", "fp32"))


def measure(run: Path) -> dict:
    from transformers import AutoTokenizer

    from app.export.measure import measure_model, proof_rows
    from app.host.machine import torch_dtype
    from app.model.pair import find_target, merged_model

    target = find_target(run)
    rows, why = proof_rows(run, target.run_cfg, True)  # the proof's rows drawn again, as an export measures itself
    if rows is None:
        raise SystemExit(f"{run}: {why}")
    tok = AutoTokenizer.from_pretrained(target.adapter_dir if (target.adapter_dir / "tokenizer_config.json").is_file()
                                        else target.base.name_or_path)
    out = {"run": f"{run.parent.name}/{run.name}", "n": len(rows.items)}
    for onto, dtype in VARIANTS:
        t = time.time()
        model = merged_model(target.adapter_dir, target.base.name_or_path, torch_dtype(dtype), True, onto=onto)
        m = measure_model(model, tok, rows, f"{onto}-{dtype}")
        out["adapter"] = m.adapter_accuracy
        out[f"{onto}-{dtype}"] = {"same": m.same, "accuracy": m.accuracy, "seconds": round(time.time() - t, 1)}
        print(run.name, onto, dtype, out[f"{onto}-{dtype}"], flush=True)
        del model
    return out


def table(rows: list[dict]) -> str:
    lines = [f"Measured by `python bench/bench_merge.py` on this machine (2 CPU cores, offline), "
             f"{date.today().isoformat()}: each run's adapter merged four ways and asked the run's proof rows again "
             "(greedy, as the proof asked them); \"same\" counts answers that are the adapter's text exactly. "
             "\"trained\" merges onto the NF4 base dequantized (the weights the adapter was trained on, the export "
             "default), \"original\" onto the base's own weights.", "",
             "| run | rows | adapter (proof) | " + " | ".join(f"{o} {d}: same, accuracy" for o, d in VARIANTS) + " |",
             "|---|---:|---:|" + "---:|" * len(VARIANTS)]
    for r in rows:
        cells = [f"{r[f'{o}-{d}']['same']}/{r['n']}, {r[f'{o}-{d}']['accuracy']:.1%}" for o, d in VARIANTS]
        lines.append(f"| {r['run']} | {r['n']} | {r['adapter']:.1%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--section", default="merged exports against the adapter")
    a = ap.parse_args()
    rows = [measure(r) for r in a.runs]
    body = table(rows)
    print(body)
    print(write_section(a.section, body))


if __name__ == "__main__":
    main()
