"""What the CLI prints about a run: its plan (`train --dry-run`) and its outcome (end of `train`, `runs show`).
rich only at module level: the CLI loads this for ``--help``."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from app.config.help import explain_rows
from app.config.methods import method_of
from app.config.resolve import model_name, resolve, warnings_for
from app.config.schema import AppConfig
from app.data import build_splits
from app.data.loading import source_kind
from app.errors import UserError
from app.model.source import check_model_source, run_model_hint, weights_problem
from app.run import layout, lookup, store
from app.run.curves import curve_keys, series, sparkline
from app.run.summary import run_summary
from app.train.planning.adjustments import adjustment_lines
from app.train.planning.memory import VERDICTS
from app.train.planning.plan import card_verdicts, decide_machine, make_plan
from app.train.planning.request import check_user_code
from app.train.planning.reward_checks import judge_answers
from app.train.planning.teacher import probe_outside


def print_plan(cfg: AppConfig, explain: str | None, console, err_console, gpu_gb: float | None = None,
               as_json: bool = False) -> None:
    """The config that would train, as the run plan fits it (stdout: YAML, or the --explain table of the keys that
    contain ``explain``; "" = all; or with ``as_json`` the whole plan as one JSON object), and the plan itself on
    stderr: the detected fields, memory estimate, fast paths, what it adjusted and why. ``gpu_gb``: plan for a CUDA
    card of that size (--gpu-memory) instead of this machine. The data's token lengths are used when the dataset is
    local or built in; nothing is downloaded and no weights are loaded."""
    # one line, exit 2, as the run says it: a model that is no folder here nor a hub id (the plan is for any machine,
    # so a hub model need not be downloadable from here)
    check_model_source(model_name(cfg), cfg.runtime.local_only, loads=False, hint=run_model_hint(cfg))
    no_weights = weights_problem(model_name(cfg))
    machine = decide_machine(cfg, card_gb=gpu_gb) if gpu_gb is not None else None  # --gpu-memory -3: exit 2
    check_user_code(cfg)  # a misspelt tool or a broken reward file: said before the data is read, as the run says it
    rows = det = None
    # a folder without weights plans (the plan reads config.json), but the run would stop there: said first
    notes: list[str] = [f"{no_weights}: a run from it would stop here"] if no_weights else []
    if cfg.data.datasets:
        try:
            labelled = method_of(cfg).rows == "labelled"  # KTO keeps the answers labelled bad too
            rows, _, det = build_splits(cfg.data, cfg.training.seed, local_only=True, labelled=labelled)
        except UserError as e:
            # what the run would refuse, the dry run refuses: a local or built-in dataset is read as the run reads
            # it; a hub dataset not in the cache is planned without its data, and said so
            if any(source_kind(d) != "hub" for d in cfg.data.datasets):
                raise
            notes.append(f"the data was not read ({e}); the plan assumes typical lengths")
    plan, refused = None, None
    try:
        plan = make_plan(cfg, rows, det, note=notes.append, offline=True, machine=machine)
        judge_answers(plan.cfg, rows, det, notes.append)  # the judge the run would ask, asked as the run asks it
        # a teacher outside the training process, probed as the run probes it: its expected throughput
        plan = replace(plan, teacher=probe_outside(plan.teacher, plan.train_ds, plan.tokenizer,
                                                   plan.cfg.model.name_or_path, notes.append))
    except UserError as e:
        plan, refused = None, e
    shown = plan.cfg if plan is not None else resolve(cfg)
    # each card planned as --gpu-memory plans it (the UI's verdicts): when a card is asked about, or for --json
    try:
        cards = (card_verdicts(cfg, rows, det, plan.model_files if plan is not None else None)[0]
                 if gpu_gb is not None or as_json else {})
    except UserError:  # refused on every card for another reason than memory: ``refused`` says it
        cards = {}
    # a note that became an adjustment is shown once, as the adjustment (plan.describe)
    reasons = " ".join(a.reason for a in plan.adjustments) if plan is not None else ""
    said = warnings_for(shown) + [n for n in notes if n not in reasons]
    if as_json:
        sys.stdout.write(json.dumps(plan_json(plan, shown, refused, said, det, cards), indent=2) + "\n")
        if refused is not None:
            raise typer.Exit(2)  # what the run would refuse, the dry run refuses (exit 2), having shown why
        return
    if explain is not None:
        _print_explained(shown, console, explain)
    else:
        sys.stdout.write(plan.config_yaml() if plan is not None else shown.to_yaml())
    if det is not None:  # what `prompt_field: null` (auto) resolves to on this data
        err_console.print(f"fields: {det.fields_line()}", highlight=False)
    for w in said:
        err_console.print(f"[yellow]note:[/] {escape(w)}", highlight=False)
    if cards and "unknown" not in cards.values():
        err_console.print("per card: " + " · ".join(f"{gb} GB {word}" for gb, word in cards.items()), highlight=False)
    if plan is None:
        err_console.print(f"[red]would be refused:[/] {escape(str(refused))}", highlight=False)
        raise typer.Exit(2)
    err_console.print(plan.describe(), highlight=False)


def plan_json(plan, shown: AppConfig, refused: UserError | None, notes: list[str], det, cards: dict) -> dict:
    """`train --dry-run --json`: the memory estimate (torch_peak_gb, total_gb and its terms), the verdict for the
    card planned for (``verdict``, in the words of ``verdict_words``; ``verdicts`` per card), the decisions the
    estimate is made of, what the plan adjusted, and the config that would train. A refused run has the refusal
    and, where the fit check refused it, the estimate behind it."""
    out: dict = {"refused": str(refused) if refused is not None else None, "notes": notes,
                 "fields": det.to_dict() if det is not None else None, "config": shown.model_dump(mode="json"),
                 "verdict_words": VERDICTS}
    if plan is None:
        est = getattr(refused, "estimate", None)
        if est is not None:
            out.update(torch_peak_gb=est.get("torch_peak_gb"), total_gb=est.get("total_gb"), card_gb=refused.gpu_gb,
                       verdict="too big", verdicts=est.get("verdicts"),
                       estimate={k: v for k, v in est.items() if k != "verdicts"})
        return out
    est, f, w = plan.estimate, plan.fast, plan.where
    out.update(torch_peak_gb=est.get("torch_peak_gb"), total_gb=est.get("total_gb"),
               device=w.gpu or "cpu", card_gb=w.vram_gb if w.cuda else None, verdict=plan.verdict,
               compute_dtype=w.compute_dtype, backend=plan.backend,
               sampler="vllm" if f.vllm else f.sampler if method_of(plan.cfg).rewarded else None,
               compiled=f.compiled, generation_batch_size=f.completions_at_once,
               steps_per_generation=f.steps_per_generation, packing=plan.decisions().packing,
               offloading=f.offloading, liger=f.liger, world_size=plan.world_size,
               adjustments=adjustment_lines(plan.adjustments), verdicts=cards,
               estimate={k: v for k, v in est.items() if k != "verdicts"})
    return out


def _print_explained(cfg: AppConfig, console, only: str = "") -> None:
    """``only``: part of a key, or several comma-separated (model.images,model.quantize_experts)."""
    parts = [s.strip().lower() for s in only.split(",") if s.strip()] or [""]
    rows = [r for r in explain_rows(cfg) if any(s in r[0].lower() for s in parts)]
    unknown = [s for s in parts if s and not any(s in r[0].lower() for r in rows)]
    if not rows or unknown:
        raise UserError(f"--explain {', '.join(unknown) or only} matches no config key; try a section (model, lora, "
                        "data, training, grpo, reward, runtime) or part of a key, several comma-separated")
    t = Table(title="resolved config (--set KEY=VALUE changes any key)", show_lines=False)
    t.add_column("key", no_wrap=True, style="bold")
    t.add_column("value", overflow="fold", max_width=40)
    t.add_column("what it does", overflow="fold", ratio=1)
    for key, value, text in rows:
        t.add_row(key, value, text)
    console.print(t)


# The summary's rows after the curves: (label, run_summary key), in the order `train` and `runs show` print them.
SUMMARY_ROWS = (("memory estimate", "memory_check"), ("fast paths", "fast_paths"), ("adjusted", "adjustments"),
                ("tool calls", "tools"), ("judge", "judgements"), ("diagnosis", "diagnosis"),
                ("held-out during training", "heldout"), ("early stopping", "early_stop"), ("held-out", "comparison"),
                ("general ability", "general_ability"), ("error", "error"))


def print_run_summary(d: Path, console, config_text: str | None = None) -> None:
    """A run's summary table, its diagnosis and its proof (`runs show`; ``config_text``: its config.yaml first,
    --config), then where the config is."""
    if config_text is not None:
        sys.stdout.write(config_text)
        sys.stdout.flush()
    recs = store.read_metrics(d)  # once: the summary and the curves both use these rows
    st = run_summary(d, recs)
    t = Table(title=f"run {d.name}: {st['status']}", show_header=True)
    t.add_column("metric")
    t.add_column("last", justify="right")
    t.add_column("curve")
    for k in curve_keys(recs):
        _, ys = series(recs, k)
        t.add_row(escape(k), f"{ys[-1]:.4g}", sparkline(ys, 32))
    t.add_row("steps", str(st.get("step")), "")
    if st.get("peak_memory"):
        est = st.get("memory_estimate_gb")
        t.add_row("peak memory", st["peak_memory"] + (f" (estimate for a GPU: {est:.1f} GB)" if est and not st.get(
            "memory_check") else ""), "")
    for label, key in SUMMARY_ROWS:  # a list (adjustments, diagnosis) is a row per line
        value = st.get(key)
        for line in value if isinstance(value, list) else [value] if value else []:
            t.add_row(label, escape(line), "")
        if key == "adjustments" and value:  # each step's first clause here; config.yaml's header has the whole
            t.add_row("", "(the whole reasons: config.yaml's header)", "")
    console.print(t)
    if st.get("adapter"):  # on its own line: the path to copy, never cut by the table's width
        console.print("adapter:", highlight=False)
        console.print(st["adapter"], highlight=False, soft_wrap=True)
    if st.get("resume_command"):
        console.print(f"continue it with: {st['resume_command']}", highlight=False, soft_wrap=True)


RUN_COLUMNS = ["name", "status", "method", "model", "dataset", "step", "loss", "reward", "pref_accuracy", "date"]
HEADERS = {"name": "run", "pref_accuracy": "pref. acc."}  # preference accuracy: app.run.layout.PREFERENCE_WORDS
MEMORY_COLUMNS = ["name", "status", "device", "estimate", "measured", "ratio"]


def _shown(value: str | None, file_folder: bool = False) -> str | None:
    """A local path as `runs list` shows it: its last part tells runs apart (a hub id stays whole); a data file also
    with its folder's name (a/data.json, b/data.json: the names people give data files repeat)."""
    if not value or not Path(value).is_absolute():
        return value
    p = Path(value)
    return f"{p.parent.name}/{p.name}" if file_folder and p.suffix and p.parent.name else p.name


def print_runs(output_dir: Path, console, memory: bool = False) -> None:
    """`runs list`: a table of the runs in a folder (``memory``: each GPU run's estimated vs measured torch peak).
    Piped (not a terminal, no COLUMNS set), every column is printed: a script reading it gets what a wide terminal
    shows; --json gives the same as data."""
    runs = lookup.list_runs(output_dir)
    # The run name is what people copy into --resume / compare / runs show (a bare name is found in runs/ and
    # demo-runs/): whole, never cut to "20261…". A narrow terminal gets the columns that fit beside it.
    name_width = min(max((len(d.name) for d in runs), default=3), 44)
    piped = not console.is_terminal and "COLUMNS" not in os.environ
    cols = MEMORY_COLUMNS if memory else list(RUN_COLUMNS)
    summaries = {d: run_summary(d) for d in runs}
    if not memory and any(s.get("tools") for s in summaries.values()):  # tool runs: their calls, beside the rest
        cols.insert(cols.index("date"), "tools")
    if not memory and any(s.get("notes") for s in summaries.values()):  # what a run's diagnosis found, by kind
        cols.insert(cols.index("date"), "notes")
    if not memory and not piped and console.width < name_width + 90:
        cols = ["name", "status", "step", "loss", "reward", "pref_accuracy"]
    t = Table(title=f"runs in {output_dir}")
    for col in cols:
        t.add_column(HEADERS.get(col, col), no_wrap=col in ("name", "status"), overflow="fold",
                     min_width=name_width if col == "name" else None)
    hints = []
    for d in runs:
        s = summaries[d]
        st = store.read_status(d) or {}
        check = st.get("memory_check") or {}
        row = {**s, "model": _shown(s.get("model")), "dataset": _shown(s.get("dataset"), file_folder=True),
               "device": st.get(layout.PEAK_DEVICE), "estimate": check.get("estimate_torch_peak_gb"),
               "measured": check.get("measured_torch_peak_gib"), "ratio": check.get("ratio")}
        if memory and not check:
            row["estimate"] = s.get("memory_estimate_gb") and f"{s['memory_estimate_gb']:.2f} (total, a GPU)"
        t.add_row(*("" if row.get(k) is None else escape(str(row[k])) for k in cols))
        if s["status"] == layout.CRASHED and s["resume_command"]:
            hints.append(f"{s['name']} crashed; continue it with: {s['resume_command']}")
    if piped:  # no terminal width to fit, so nothing is folded away
        from rich.console import Console

        Console(file=console.file, width=max(200, name_width + 160)).print(t)
    else:
        console.print(t)
    for h in hints:
        console.print(h, highlight=False, soft_wrap=True)
