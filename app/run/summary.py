"""Summaries of run directories for `qlora-app runs` and the UI's Runs tab."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml

from app.config.data_section import DataConfig
from app.host.procs import pid_alive
from app.run import benchmarks, integrity, layout, lookup, proof, store
from app.run.watch import standing


def _ms(ms: float) -> str:
    """A call's time as a person reads it: 0.21 ms, 12.5 ms, 1,042 ms, 3.4 s (never 1e+03).

    >>> [_ms(x) for x in (0.2149, 12.46, 1042.0, 3400.0)]
    ['0.215 ms', '12.5 ms', '1,042 ms', '3.4 s']
    """
    if ms >= 2000:
        return f"{ms / 1000:.1f} s"
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def run_summary(d: Path, records: list[dict] | None = None) -> dict:
    """``records``: the run's metrics.jsonl rows when the caller has read them already."""
    d = Path(d)
    try:
        cfg = yaml.safe_load((d / layout.CONFIG).read_text()) or {}
    except (OSError, yaml.YAMLError):
        cfg = {}
    st = store.read_status(d) or {}
    status = st.get("status", layout.CREATED)
    if status == layout.RUNNING and not pid_alive(st.get("pid")):
        status = layout.CRASHED
    # polled by the UI: check the checkpoint's structure, not every byte of its optimizer state
    resumable = integrity.last_checkpoint(d, verify_data=False) is not None
    recs = store.read_metrics(d) if records is None else records
    cmp = proof.latest_proof(d)
    last = {}
    for r in recs:  # last non-null value of each key
        last.update({k: v for k, v in r.items() if v is not None})
    started = st.get("started")
    return {
        "name": d.name,
        "path": str(d),
        "status": status,
        "method": cfg.get("method"),
        "model": (cfg.get("model") or {}).get("name_or_path"),
        "dataset": _data_label(cfg.get("data") or {}),
        "step": st.get("step"),
        "max_steps": st.get("max_steps"),
        "loss": _fmt(last.get("loss")),
        "reward": _fmt(last.get("reward")),  # GRPO's mean reward; preference runs have their own column
        "pref_accuracy": _pct(preference_accuracy(recs, cmp)),
        "date": datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M") if started else "",
        "error": st.get("error"),
        "fast_paths": st.get("fast_paths"),
        "adjustments": st.get("adjustments") or [],
        "memory_estimate_gb": st.get("memory_estimate_gb"),
        "memory_check": memory_check_text(st.get("memory_check")),
        # the running peak status.json holds, or the last logged one for a crashed run
        "peak_memory": peak_memory_text({**last, **st}),
        "adapter": str(d / layout.ADAPTER) if lookup.has_adapter(d) else None,
        "comparison": comparison_text(cmp),
        "heldout": heldout_text(recs, st),
        "early_stop": early_stop_text(st),  # training.early_stop: where it stopped, which adapter is the run's
        # general ability, base vs adapter: the newest `qlora-app eval` (lm-evaluation-harness) of the run
        "general_ability": benchmarks.eval_text(benchmarks.latest_eval(d)),
        "tools": tools_text(st.get(layout.TOOL_COUNTS)),
        "judgements": tools_text(st.get(layout.JUDGE_COUNTS), "judgements"),
        "calls": calls_brief(st),
        # why the reward may be flat, as the run said it (app/run/diagnosis.py): the sentences, and their kinds
        "diagnosis": [d.get("message", "") for d in st.get(layout.DIAGNOSIS) or []],
        "notes": ", ".join(d.get("kind", "") for d in standing(st.get(layout.DIAGNOSIS)))
        or None,  # a withdrawn warning keeps its words above, with why; the runs list names only those that hold
        "resumable": resumable,
        # what to type next for a run that stopped before its end
        "resume_command": (f"qlora-app train --resume {d}" if resumable and status in
                           (layout.CRASHED, layout.INTERRUPTED, layout.FAILED) else None),
    }


def _data_label(data: dict) -> str | None:
    """The run's data as config.data.label says it: its dataset, or its mix ('arith 70% + my.jsonl 30%')."""
    if not data.get("mix"):
        return data.get("dataset")
    try:
        return DataConfig.model_validate(data).label
    except ValueError:  # a config.yaml edited by hand into something invalid: its datasets, as listed
        return " + ".join(str(p.get("dataset")) for p in data["mix"] if isinstance(p, dict))


def calls_brief(st: dict) -> str | None:
    """'calculator 412 calls, 9 failed · judge 56 calls, 56 failed': each tool's and the judge's calls and failures in
    a few words, for a table row (the Runs tab) where a run whose every judgement failed must not look healthy."""
    parts = [f"{name} {c['calls']} calls, {c['failures']} failed"
             for key in (layout.TOOL_COUNTS, layout.JUDGE_COUNTS) for name, c in (st.get(key) or {}).items()]
    return " · ".join(parts) or None


def tools_text(counts: dict | None, calls: str = "calls") -> str | None:
    """'calculator 412 calls, 9 failed (2 timed out), 0.21 ms each (first failure: ToolFailed: ...)': a tool run's
    totals per tool (status.json), with why the first failed call failed; a judged run's judgements the same way
    ('judge 640 judgements, 3 failed (1 timed out), 12.5 ms each')."""
    if not counts:
        return None
    parts = []
    for name, c in counts.items():
        timed = f" ({c['timeouts']} timed out)" if c.get("timeouts") else ""
        latency = f", {_ms(c['mean_latency_ms'])} each" if c.get("mean_latency_ms") is not None else ""
        why = f" (first failure: {c['first_error']})" if c.get("failures") and c.get("first_error") else ""
        parts.append(f"{name} {c['calls']} {calls}, {c['failures']} failed{timed}{latency}{why}")
    return "; ".join(parts)


def _pct(x: float | None) -> str | None:
    return None if x is None else f"{x:.1%}"


def heldout_text(records: list[dict], st: dict) -> str | None:
    """'accuracy 28.1% at step 6 -> 59.4% at step 60; best 59.4% at step 54 (95% interval 42%-75%) (32 rows)': the
    evaluation during training, with the rows each point scored (training.eval_rows, as status.json records them)."""
    points = [(r["step"], r[layout.EVAL_ACCURACY]) for r in records if r.get(layout.EVAL_ACCURACY) is not None]
    pairs = [(r["step"], r[layout.EVAL_PREF_ACCURACY]) for r in records
             if r.get(layout.EVAL_PREF_ACCURACY) is not None]
    if not points and not pairs:
        return None
    best = (f"; best {st[layout.BEST_SCORE]:.1%} at step {st[layout.BEST_STEP]}"
            if st.get(layout.BEST_STEP) is not None and st.get(layout.BEST_SCORE) is not None else "")
    low, high = layout.interval_keys(layout.EVAL_ACCURACY if points else layout.EVAL_PREF_ACCURACY)
    at_best = next((r for r in records if r.get("step") == st.get(layout.BEST_STEP) and r.get(low) is not None), None)
    if best and at_best:  # how precise the best point is on the rows it scored (Wilson's 95% interval)
        best += f" (95% interval {at_best[low]:.0%}-{at_best[high]:.0%})"
    rows = f" ({st[layout.EVAL_ROWS]} rows)" if st.get(layout.EVAL_ROWS) else ""
    parts = []
    if points:
        (s0, a0), (s1, a1) = points[0], points[-1]
        parts.append(f"accuracy {a0:.1%} at step {s0} -> {a1:.1%} at step {s1}{best if points else ''}{rows}")
    if pairs:
        (s0, a0), (s1, a1) = pairs[0], pairs[-1]
        parts.append(f"preference accuracy {a0:.1%} at step {s0} -> {a1:.1%} at step {s1}" + ("" if points else best)
                     + (f" ({st[layout.PREF_ROWS]} pairs)" if st.get(layout.PREF_ROWS) else ""))
    return "; ".join(parts)


def chosen_line(config: dict) -> str | None:
    """'the 32 held-out rows the adapter was chosen on (the evaluations during training) are left out of these
    figures': compare.json's config, for an adapter picked as the best held-out point (None otherwise)."""
    n = config.get("chosen_on")
    return (f"the {n} held-out rows the adapter was chosen on (it is the best of the evaluations during training, "
            "which scored them) are left out of these figures") if n else None


def early_stop_text(st: dict) -> str | None:
    """'stopped at step 40: the best held-out point was step 20; the run's adapter is step 20's, the last step's is
    in adapter-last/': what training.early_stop did, as status.json records it (None when it was off)."""
    es = st.get(layout.EARLY_STOP)
    if not es:
        return None
    at = f"the best held-out point was step {es.get('best_step')}"
    head = (f"stopped at step {es['stopped_at']}: {at}" if es.get("stopped_at") is not None
            else f"not stopped early ({es.get('waited', 0)} of {es.get('patience')} held-out points without a rise "
                 f"by its last step): {at}")
    chose = st.get(layout.ADAPTER_STEP)
    if chose is not None and chose == es.get("best_step") and st.get("step") != chose:
        head += f"; the run's adapter is step {chose}'s, the last step's is in {layout.LAST_ADAPTER}/"
    return head


def comparison_text(cmp: dict | None) -> str | None:
    """'accuracy base 21.0% -> adapter 47.0% (+26.0 pts), 28 wins / 70 ties / 2 losses, on 100 held-out rows': the
    run's proof (RUN/compare.json), or None when it has none."""
    if not cmp or "summary" not in cmp:
        return None
    s = cmp["summary"]
    b, a = s["base"].get("accuracy"), s["adapter"].get("accuracy")
    acc = (s.get("lift") or {}).get("accuracy")  # how sure the lift is (app/eval/uncertainty.py)
    sure = (f", {acc.get('level', 0.95):.0%} interval {100 * acc['low']:+.1f} to {100 * acc['high']:+.1f}"
            + ("" if acc.get("shown") else ": no difference shown")) if acc else ""
    if b is not None and a is not None:
        head = f"accuracy base {b:.1%} -> adapter {a:.1%} ({(a - b) * 100:+.1f} pts{sure})"
    else:
        base, adapter = (_fmt(s[k].get("mean_reward")) for k in ("base", "adapter"))
        head = f"mean reward base {base} -> adapter {adapter}"
    rows = f"on {s['n']} held-out rows" if s.get("heldout", True) else f"on {s['n']} typed prompts"
    chosen = (cmp.get("config") or {}).get("chosen_on")
    rows += f" (not the {chosen} the adapter was chosen on)" if chosen else ""
    if s.get("teacher") and b is not None and s["teacher"].get("accuracy") is not None:  # a distillation run
        closed = s.get("closed")
        head += f", teacher {s['teacher']['accuracy']:.1%}" + (f" ({closed:.0%} of its lead closed)"
                                                             if closed is not None else "")
    pref = preference_text(cmp.get("preference"))
    per = "; ".join(dataset_lines(s))
    return (f"{head}, {s['wins']} wins / {s['ties']} ties / {s['losses']} losses, {rows}"
            + (f"; {pref}" if pref else "") + (f"; per dataset: {per}" if per else ""))


def lift_words(lift: dict | None, what: str, pct: bool) -> str | None:
    """One line of a lift as compare.json keeps it (app.eval.uncertainty.Lift.to_dict): "accuracy +12.0 pts (95%
    interval +4.0 to +20.0, McNemar p = 0.003): a gain shown on 100 rows", or "accuracy: no difference shown on 100
    rows (+3.0 pts, 95% interval -3.0 to +9.0; about 420 rows would show +3.0 pts)"."""
    if not lift:
        return None
    scale, unit = (100, " pts") if pct else (1, "")

    def num(x: float) -> str:
        return f"{scale * x:+.1f}{unit}" if pct else f"{x:+.3f}"

    interval = f"{lift.get('level', 0.95):.0%} interval {num(lift['low'])} to {num(lift['high'])}"
    p = f", McNemar p = {lift['p']:.2g}" if lift.get("p") is not None else ""
    n = lift["n"]
    if lift.get("shown"):
        word = "gain" if lift["diff"] > 0 else "loss"
        return f"{what} {num(lift['diff'])} ({interval}{p}): a {word} shown on {n} rows"
    more = (f"; about {lift['rows_to_show']} rows would show {num(lift['diff'])}"
            if lift.get("rows_to_show") and lift["rows_to_show"] > n else "")
    return f"{what}: no difference shown on {n} rows ({num(lift['diff'])}, {interval}{p}{more})"


def lift_lines(lift: dict | None) -> list[str]:
    """A proof's lines of how sure its lift is (its summary's ``lift``: the accuracy's and the mean reward's), as the
    terminal, the page, the UI and the card say them."""
    lift = lift or {}
    return [line for line in (lift_words(lift.get("accuracy"), "accuracy", pct=True),
                              lift_words(lift.get("mean_reward"), "mean reward", pct=False)) if line]


def dataset_lines(summary: dict) -> list[str]:
    """A mix's proof per dataset: 'arith (70 rows): accuracy 21.0% -> 52.0% (+31.0 pts)' (mean reward where its rows
    have no reference). The terminal, the UI, `runs` and the card all say it this way."""
    out = []
    for name, f in (summary.get("by_dataset") or {}).items():
        b, a = f["base"].get("accuracy"), f["adapter"].get("accuracy")
        if b is not None and a is not None:
            figure = f"accuracy {b:.1%} -> {a:.1%} ({(a - b) * 100:+.1f} pts)"
        else:
            figure = f"mean reward {_fmt(f['base'].get('mean_reward'))} -> {_fmt(f['adapter'].get('mean_reward'))}"
        out.append(f"{name} ({f['n']} rows): {figure}")
    return out


def preference_text(p: dict | None) -> str | None:
    """'preference accuracy 79.0%, reward margin +0.41; chosen more likely base 48.0% -> adapter 81.0%; on 100
    held-out pairs' (the names of app.run.layout.PREFERENCE_WORDS)."""
    f = proof.preference_figures(p)
    if not f:
        return None
    return (f"preference accuracy {f['accuracy']:.1%}, reward margin {f['margin']:+.3g}; chosen more likely base "
            f"{f['base_likelier']:.1%} -> adapter {f['adapter_likelier']:.1%}; on {f['n']} held-out pairs")


def preference_accuracy(recs: list[dict], cmp: dict | None) -> float | None:
    """A DPO run's preference accuracy: on its held-out pairs (the proof, else the last evaluation), else on its
    last training batch; None for a run without pairs."""
    p = proof.preference_figures((cmp or {}).get("preference"))
    if p:
        return p["accuracy"]
    for key in (layout.EVAL_PREF_ACCURACY, layout.DPO_ACCURACY):
        last = next((r[key] for r in reversed(recs) if r.get(key) is not None), None)
        if last is not None:
            return last
    return None


def memory_check(estimate: dict, peak: dict) -> dict:
    """The plan's estimate beside what the run measured (status.json's memory_check): torch's peak reserved."""
    est, measured = estimate.get("torch_peak_gb"), peak.get(layout.PEAK_RESERVED)
    return {"estimate_torch_peak_gb": None if est is None else round(est, 2),
            "estimate_total_gb": None if estimate.get("total_gb") is None else round(estimate["total_gb"], 2),
            "measured_torch_peak_gib": measured,
            "ratio": round(est / measured, 3) if est and measured else None}


def memory_check_text(check: dict | None) -> str | None:
    """'estimated 17.6 GB, measured 17.27 GiB (x1.02)': a GPU run's estimate against its measured torch peak."""
    if not check or check.get("measured_torch_peak_gib") is None or check.get("estimate_torch_peak_gb") is None:
        return None
    return (f"torch peak estimated {check['estimate_torch_peak_gb']:.2f} GB, measured "
            f"{check['measured_torch_peak_gib']:.2f} GiB (x{check['ratio']:.2f})")


def peak_memory_text(st: dict) -> str | None:
    """'5.71 GiB reserved (5.20 allocated) on the GPU' from status.json / metrics fields, or None when not recorded."""
    reserved, allocated = st.get(layout.PEAK_RESERVED), st.get(layout.PEAK_ALLOCATED)
    if reserved is None:
        return None
    if st.get(layout.PEAK_DEVICE) == "cuda":
        return f"{reserved:.2f} GiB reserved ({allocated:.2f} GiB allocated) on the GPU"
    return f"{reserved:.2f} GiB peak RSS (CPU)"


def _fmt(v):
    return None if v is None else float(f"{v:.4g}")
