"""`qlora-app doctor`: what this machine can do, and what to change if something is missing; `qlora-app doctor RUN`:
why a run's reward is (or is not) flat, from its own logged steps (app/run/diagnosis.py)."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil

from rich.markup import escape
from rich.table import Table

from app.config.build import build_config, load_yaml_file, validate
from app.config.methods import method_of
from app.errors import UserError
from app.eval.harness import INSTALL_HINT
from app.export.gguf import EXTRA, converter_version
from app.export.llamacpp import probe
from app.host.machine import installed
from app.run import layout, lookup, store
from app.run.diagnosis import WINDOW, Facts, diagnose, step_lines, step_mean, steps_of, window
from app.train.planning.fastpaths import FLA_COST, FLA_EXTRA
from app.train.planning.plan import make_plan


def _default_plan() -> tuple:
    """(plan, None) for what `qlora-app train --dataset gsm8k` would do here (device, dtype, backend, sampler,
    vLLM, kernels, memory estimate), decided by the run plan itself; (None, why) when it would be refused."""
    try:
        return make_plan(build_config({"data": {"dataset": "gsm8k"}}), offline=True), None
    except UserError as e:
        return None, str(e)


def gguf_export() -> str:
    """Whether `export --format gguf|ollama` can run here: llama.cpp's converter (the [gguf] extra), and a
    llama.cpp to check the written file's tokenizer against (optional)."""
    if not (installed("gguf") and installed("conversion")):
        return f"not available: {EXTRA}"
    version = converter_version() or "installed"
    checked = ("Q4_K_M and the other k-quants by llama.cpp's quantizer; the tokenizer of each file is checked in "
               "llama.cpp" if installed("llama_cpp") else "llama-cpp-python not installed: f16 / bf16 / q8_0 / f32 "
               "only (no Q4_K_M) and the written file's tokenizer is not checked")
    return f"available (llama.cpp's converter {version}; {checked})"


def llama_cpp_probe() -> str:
    """How llama.cpp runs quantized files on this CPU: one token of a small Q8_0 file in a child process, as llama.cpp
    defaults and else with its plain CPU buffers (app/export/llamacpp.py); a CPU that faults is said, with the fix."""
    try:
        return probe().line
    except Exception as e:  # noqa: BLE001 - the probe file needs the converter ([gguf]): said, never a traceback
        return f"not checked ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"


def eval_extra() -> str:
    """Whether `qlora-app eval` can run here: lm-evaluation-harness, the [eval] extra."""
    try:
        return f"available (lm-eval {md.version('lm-eval')})"
    except md.PackageNotFoundError:
        return f"not available: {INSTALL_HINT}"


def report(console) -> None:
    t = Table(title="qlora-app doctor")
    t.add_column("check")
    t.add_column("value")
    for pkg in ("qlora-app", "torch", "transformers", "trl", "peft", "bitsandbytes", "datasets", "accelerate", "gradio",
                "math-verify", "trackio"):
        try:
            t.add_row(pkg, md.version(pkg))
        except md.PackageNotFoundError:
            t.add_row(pkg, "[red]not installed[/]")
    plan, refused = _default_plan()
    if plan is not None:
        w = plan.where
        t.add_row("GPU", w.gpu or "none (CPU: works, slowly; 4-bit via bitsandbytes CPU kernels)")
        if w.vram_gb:
            t.add_row("VRAM", f"{w.vram_gb:.1f} GB")
        t.add_row("compute dtype (auto)", w.compute_dtype)
        t.add_row("backend (auto)", plan.backend)
    for pkg, why in (("flash-attn", "packed SFT without masks"), ("vllm", "GRPO sampling in colocate mode"),
                     ("liger-kernel", "fused kernels"),
                     ("flash-linear-attention", f"Qwen3.5's linear-attention layers; without it: {FLA_COST}; "
                                                f"{FLA_EXTRA}"),
                     ("causal-conv1d", "the same layers' convolution")):
        try:  # escaped: an extra's brackets ('qlora-app[fla]') are no Rich markup
            t.add_row(pkg, escape(f"{md.version(pkg)} ({why})"))
        except md.PackageNotFoundError:
            t.add_row(pkg, escape(f"not installed (optional, CUDA: {why})"))
    t.add_row("GRPO fast paths (auto)", escape(plan.describe().replace("\n", "; ") if plan is not None
                                               else f"the default run would be refused here: {refused}"))
    t.add_row("GGUF export (export --format gguf|ollama)", escape(gguf_export()))
    t.add_row("quantized GGUF in llama.cpp", escape(llama_cpp_probe()))
    t.add_row("benchmarks (qlora-app eval)", escape(eval_extra()))
    t.add_row("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "unset"))
    t.add_row("chromium (UI tests)", shutil.which("chromium") or "not found (apt-get install chromium)")
    console.print(t)


def report_run(run, console) -> int:
    """What a run's logged steps show (the diagnosis the run said while it trained, re-read from metrics.jsonl and
    config.yaml), with the numbers each check reads. Returns how many findings there are."""
    d = lookup.require_run_dir(run)
    cfg = validate(load_yaml_file(d / layout.CONFIG))
    records = store.read_metrics(d)
    lines = step_lines(records)  # each logged line stands for the steps since the one before, as the checks count
    found = diagnose(records, Facts.of(cfg))
    steps = steps_of(lines)
    console.print(f"[bold]{escape(d.name)}[/]: {cfg.method.upper()}, {steps} training steps in {len(lines)} logged "
                  "lines")
    if steps >= WINDOW:
        console.print(_signals(window(lines)))
    elif not found:
        console.print(f"too few training steps to read ({steps}; the checks need {WINDOW}): nothing to say yet",
                      highlight=False)
        return 0
    if not found and not method_of(cfg).rewarded:  # SFT, DPO, KTO, distillation: no reward was sampled
        console.print(f"no reward to read: a {cfg.method.upper()} run trains on no sampled reward, so the checks "
                      "for a flat reward (GRPO's) have nothing to say; its held-out curve (curves.png) and its proof "
                      "(compare.json) say whether it learned", highlight=False)
    elif not found:
        console.print("no sign of a flat reward: none of the checks' signals persisted (docs/rewards.md lists "
                      "them)", highlight=False)
    for f in found:  # a failing judge is said before any window
        console.print(f"[bold yellow]{f.kind}[/]: {escape(f.message)}", soft_wrap=True)
    return len(found)


def _signals(last: list[dict]) -> Table:
    """The signals the checks read over the last window, each its mean over the steps (the adapter's movement, its
    sum)."""
    t = Table(title=f"the signals over the last {WINDOW} training steps (steps {last[0].get('step')}-"
                    f"{last[-1].get('step')})")
    t.add_column("signal")
    t.add_column("mean", justify="right")
    read = ("reward", "frac_reward_zero_std", "completions/clipped_ratio", layout.ADAPTER_UPDATE)
    for key in sorted({k for r in last for k in r if k in read or k.startswith("rewards/") and k.endswith("/mean")}):
        if key == layout.ADAPTER_UPDATE:  # the adapter's movement adds up over the window
            moved = [r[key] for r in last if isinstance(r.get(key), (int, float))]
            t.add_row(escape(key) + " (sum)", f"{sum(moved):.4g}")
        elif (mean := step_mean(last, key)) is not None:
            t.add_row(escape(key), f"{mean:.4g}")
    return t
