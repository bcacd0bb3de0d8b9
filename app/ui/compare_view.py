"""The Compare tab: base vs adapter through app.compare.run_comparison, rendered side by side (no Gradio here)."""

from __future__ import annotations

from pathlib import Path

from app import rundir
from app.errors import UserError


def compare_choices(runs_dir: str | Path) -> list[str]:
    """Runs that have an adapter to compare, newest first."""
    return [d.name for d in rundir.list_runs(runs_dir) if (d / rundir.ADAPTER / "adapter_config.json").is_file()]


def _ending(jobs) -> bool:
    st = (rundir.read_status(jobs.run_dir) or {}).get("status") if jobs.run_dir else None
    return st in (rundir.FINISHED, rundir.FAILED, rundir.INTERRUPTED)


def compare(jobs, runs_dir: str | Path, name: str, prompt: str | None, num_samples: int, max_new_tokens: int,
            local_only: bool, progress=None) -> dict:
    """Base vs adapter for a run (app.compare.run_comparison), refused while training holds the GPU."""
    if not name:
        raise UserError("select a run with an adapter (finished or stopped runs have one)")
    if jobs.is_running() and _ending(jobs):
        # The engine marks the run finished, then writes curves.png and exits: give it a moment to free the GPU.
        try:
            jobs.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - still running: refused below
            pass
    if jobs.is_running():
        raise UserError("a training run is using the GPU; wait for it to finish or Stop it, then compare")
    d = rundir.require_run_dir(Path(runs_dir) / name)
    prompts = [prompt.strip()] if prompt and prompt.strip() else []
    n = int(num_samples or 0)
    if not prompts and n <= 0:
        raise UserError("type a prompt or choose a number of held-out rows to sample")
    from app.compare import run_comparison

    return run_comparison(d, num_samples=n, prompts=prompts, max_new_tokens=int(max_new_tokens or 128),
                          local_only=bool(local_only), progress=progress)


def _num(v, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.1f}%" if pct else f"{v:.3f}"


def compare_summary_markdown(result: dict) -> str:
    s = result["summary"]
    b, a = s["base"], s["adapter"]
    rows = ["| | base | adapter |", "|---|---:|---:|",
            f"| mean reward | {_num(b.get('mean_reward'))} | {_num(a.get('mean_reward'))} |"]
    if b.get("accuracy") is not None or a.get("accuracy") is not None:
        rows.append(f"| accuracy | {_num(b.get('accuracy'), True)} | {_num(a.get('accuracy'), True)} |")
    for comp in (b.get("components") or {}):
        rows.append(f"| reward/{comp} | {_num(b['components'].get(comp))} | "
                    f"{_num((a.get('components') or {}).get(comp))} |")
    return ("\n".join(rows) + f"\n\nadapter vs base by reward: **{int(s['wins'])} wins**, {int(s['ties'])} ties, "
            f"{int(s['losses'])} losses")


COMPARE_CSS = """
.cmp-row{border:1px solid #dde1e8;border-radius:6px;margin:0 0 12px;padding:8px 10px}
.cmp-prompt,.cmp-ref{white-space:pre-wrap;margin:2px 0} .cmp-ref{opacity:.75}
.cmp-cols{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin-top:6px}
.cmp-side{border:1px solid #e6e9ef;border-radius:4px;padding:6px 8px}
.cmp-side h4{margin:0 0 4px;font-size:13px}
.cmp-out{white-space:pre-wrap;font-family:ui-monospace,Menlo,monospace;font-size:13px}
.onlybase{background:#fde2e1} .onlyadapter{background:#d9f2e0}
"""


def compare_html(result: dict) -> str:
    """Each prompt with base and adapter side by side, differing words highlighted. All model and dataset text is
    escaped: model output is untrusted."""
    from html import escape

    from app.compare_html import diff_spans

    def mark(c):
        return "" if c is None else (" ✓" if c else " ✗")

    out = []
    for i, r in enumerate(result["rows"], 1):
        b, a = r["base"], r["adapter"]
        left, right = diff_spans(b["text"], a["text"])
        ref = (f"<div class='cmp-ref'>reference: {escape(str(r['reference']))}</div>"
               if r.get("reference") is not None else "")
        sides = "".join(
            f"<div class='cmp-side' data-side='{side}'><h4>{side} · reward {c['reward']:.3f}{mark(c.get('correct'))}"
            f"</h4><div class='cmp-out'>{body}</div></div>"
            for side, c, body in (("base", b, left), ("adapter", a, right)))
        out.append(f"<div class='cmp-row'><div class='cmp-prompt'><b>#{i}</b> {escape(r['prompt'])}</div>{ref}"
                   f"<div class='cmp-cols'>{sides}</div></div>")
    return "".join(out)
