"""tools: a GRPO step with a tool against plain TRL's own tool loop, same model, rows, tool and reward (CPU).

    python bench/bench_tools.py

Both sides train the shipped tool-calling base (app/assets/arith-tools-base, which calls the calculator on nearly
every completion, so the tool loop really runs) on built-in arith-calc rows: `qlora-app train --tools calculator`
(every call through the guard, the merged sampler, the held-out evaluation off) against bench/plain_trl.py
handing TRL the same calculator (`GRPOTrainer(tools=[calculator], max_tool_calling_iterations=1)`). The ratio is
qlora-app's s/step over plain TRL's, from interleaved pairs (bench/ratio.py), with the calls per completion on
each side (same work). Rewrites the `## tools` section of docs/performance.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import bench_trl
from perfdoc import write_section

sys.path.insert(0, str(bench_trl.ROOT))

from app.config.builtin import TOOLS_MODEL, shipped_dir  # noqa: E402
from app.data.arith import CALC_OPERANDS, split_rows  # noqa: E402
from app.demo.build_tools_base import TOOLS_SYSTEM_PROMPT  # noqa: E402

REPS = 3
STEPS = 6


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tools-"))
    train, _ = split_rows(CALC_OPERANDS)
    (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train[:400]))
    spec = {"model": str(shipped_dir(TOOLS_MODEL)), "rows": str(tmp / "rows.jsonl"), "seed": 42, "r": 16,
            "alpha": 32, "checkpointing": False, "max_length": 1024, "method": "grpo", "lr": 1e-4, "steps": STEPS,
            "batch": 32, "accum": 1, "num_generations": 8, "completion": 64, "system_prompt": TOOLS_SYSTEM_PROMPT,
            "generation_batch_size": 32, "tools": ["calculator"], "max_tool_calls": 1}
    extra = ("tools.use=calculator", "grpo.max_tool_calls=1", "training.eval_every=0", "training.proof_rows=0",
             f"data.system_prompt={json.dumps(TOOLS_SYSTEM_PROMPT)}")
    r, res = bench_trl.overhead("tools_step", spec, tmp, REPS, 0.15, extra)
    ours_s, plain_s = res["s_per_step"]["ours"], res["s_per_step"]["plain"]
    c_ours, c_plain = res["tool_calls"]["ours"], res["tool_calls"]["plain"]
    verdict = f"{r.median:.2f}" if r.trusted else f"not trusted ({r.why_not()})"
    text = (f"A GRPO step with the calculator tool on the shipped tool-calling base (arith-tools-base, 4-bit, CPU, "
            f"{spec['batch']} completions a step, {spec['num_generations']} per prompt, one round of calls, "
            f"{STEPS} steps a run, {REPS} interleaved pairs): qlora-app (`--tools calculator`: the guard on every "
            f"call, the merged sampler) against plain TRL handed the same function (`GRPOTrainer(tools=...)`).\n\n"
            f"| | s/step (median) | calls per completion |\n|---|---:|---:|\n"
            f"| qlora-app | {ours_s:.2f} | {c_ours:.2f} |\n| plain TRL | {plain_s:.2f} | {c_plain:.2f} |\n\n"
            f"Ratio qlora-app / TRL: **{verdict}** (pairs {', '.join(f'{x:.2f}' for x in r.pairs)}; below 1 is "
            f"faster). Same work: the calls per completion differ only by sampling.")
    write_section("tools", text)
    print(text)


if __name__ == "__main__":
    main()
