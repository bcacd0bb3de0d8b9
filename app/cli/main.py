"""`qlora-app` command line: train (and --dry-run), inspect, score, compare, demo, ui, presets, runs, doctor here;
chat, export, push and prefetch in app/cli/ship.py.

Owns: the commands' options and how their input becomes a request (app.config.build.build_config, with the option ->
config key table app.config.flags.FLAGS that the UI's form shares). A run goes through its session
(app/train/running/session.py); nothing here trains, plans or writes a run folder. Bad input is one red line and exit 2
(``main``). Module level imports stay light (typer, rich, pydantic, yaml): `qlora-app --help` must not pay for
torch, transformers or gradio.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.cli import evaluate, options, pairs, ship
from app.cli.compare import DEFAULT_SAMPLES, one_target, run_compare_cli
from app.cli.doctor import report, report_run
from app.cli.inspect import run_inspect
from app.cli.options import Command, Group, explain_value, switch
from app.cli.plan_report import print_plan, print_run_summary, print_runs
from app.cli.score import run_score
from app.config.build import build_config, load_config_file, load_yaml_file
from app.config.flags import CLI_FLAGS, flags_layer
from app.config.presets import list_presets, load_preset, preset_path
from app.config.methods import DEFAULT_MODEL, IN_WORDS, METHODS
from app.config.schema import AppConfig
from app.demo.choose import run_chosen_demo
from app.demo.run import DemoInterrupted
from app.errors import UserError
from app.host.offline import apply_local_only, no_telemetry
from app.host.process import start_command
from app.host.threads import use_free_cores
from app.run import layout, lookup
from app.run.summary import run_summary
from app.serve.engine import Engine
from app.serve.server import api_key as serve_key
from app.serve.server import banner, check_serving, server
from app.serve.vllm_engine import serve_with_vllm
from app.train.running import launcher
from app.train.running.session import Session
from app.train.running.torchrun import is_worker, wants_launcher
from app.ui.serve import launch

app = typer.Typer(
    cls=Group,
    name="qlora-app",
    help=f"QLoRA fine-tuning ({IN_WORDS}) on one consumer GPU: train, inspect data, score, compare, UI.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        import importlib.metadata as md

        console.print(f"qlora-app {md.version('qlora-app')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = switch("--version", callback=_version, is_eager=True,
                                       help="Print qlora-app's version and exit.")):
    # typer shows the group's help above (``help=``): this docstring is for readers of the code
    """The `qlora-app` group: --version."""


presets_app = typer.Typer(cls=Group, help="List and show the built-in presets.", no_args_is_help=True)
runs_app = typer.Typer(cls=Group, help="List and show runs in a runs folder.", no_args_is_help=True)
app.add_typer(presets_app, name="presets")
app.add_typer(runs_app, name="runs")

console = Console()
err_console = Console(stderr=True)

SetOpt = typer.Option(None, "--set", help="Override any config key: --set training.save_steps=5 or --set r=8.")


# ---------------------------------------------------------------------------------------------------------- train


@app.command(cls=Command, help=f"Fine-tune a LoRA adapter on a 4-bit base with {IN_WORDS}.")
def train(
    dataset: Optional[List[str]] = typer.Option(None, help="Hub id, local file or 'arith'; repeat it for a mix."),
    mix: Optional[str] = typer.Option(None, help="A mix's shares, one per --dataset: 0.7,0.3 (default: each whole)."),
    method: Optional[str] = typer.Option(None, help="; ".join(f"{n}: {m.learns_from}" for n, m in METHODS.items())
                                         + f" (default {AppConfig.model_fields['method'].default})."),
    model: Optional[str] = typer.Option(None, help=f"Hub id or local model folder (default: {DEFAULT_MODEL}; "
                                              "'arith-base' is the tiny model shipped for offline use)."),
    preset: Optional[str] = typer.Option(None, help="Preset name (qlora-app presets list) or YAML file."),
    config: Optional[Path] = typer.Option(None, help="A full config YAML (as written into run directories)."),
    dataset_config: Optional[str] = typer.Option(None, "--dataset-config", help="Hub dataset config name."),
    prompt_field: Optional[str] = typer.Option(None, help="Column holding the prompt (default: auto-detect)."),
    reference_field: Optional[str] = typer.Option(None, help="Column holding the reference answer (auto)."),
    chosen_field: Optional[str] = typer.Option(None, help="Preference data: column of the preferred answer (auto)."),
    rejected_field: Optional[str] = typer.Option(None, help="Preference data: column of the rejected answer (auto)."),
    label_field: Optional[str] = typer.Option(None, help="Unpaired answers (KTO): the good / bad column (auto)."),
    max_steps: Optional[int] = typer.Option(None, help="Stop after this many optimizer steps."),
    output_dir: Optional[str] = typer.Option(None, help="Parent folder for run directories (default: runs)."),
    run_dir: Optional[Path] = typer.Option(None, help="Use this (new, empty) folder as the run directory."),
    local_only: bool = switch("--local-only", help="Air-gapped: local paths and HF cache only."),
    resume: Optional[Path] = typer.Option(None, help="Continue RUN_DIR from its last checkpoint."),
    reward: Optional[List[str]] = typer.Option(None, help="Extra reward 'module:function' or 'file.py:function'."),
    tools: Optional[List[str]] = typer.Option(None, help="GRPO with tools: a built-in tool (calculator), FILE.py "
                                                         "(its typed, documented functions) or FILE.py:fn1,fn2."),
    environment: Optional[str] = typer.Option(None, help="GRPO in a multi-turn environment: FILE.py:Class (its "
                                                         "methods are the tools; reset() starts each rollout)."),
    chat_template: Optional[str] = typer.Option(None, "--chat-template", help="A chat template TRL ships, by name "
                                                                              "(qwen2_5, qwen3, llama3_1, ...)."),
    reference_match: Optional[str] = typer.Option(None, help="auto, exact, numeric, math or overlap (ROUGE-L)."),
    judge_url: Optional[str] = options.JUDGE_URL,
    judge_model: Optional[str] = options.JUDGE_MODEL,
    judge_rubric: Optional[str] = options.JUDGE_RUBRIC,
    teacher: Optional[str] = options.TEACHER,
    set_: Optional[List[str]] = SetOpt,
    dry_run: bool = switch("--dry-run", help="Print the resolved config and exit; loads no weights."),
    explain: bool = switch("--explain", help="With --dry-run: every key, its value and what it does; --explain "
                                             "lora (or grpo.loss) shows only the matching keys."),
    explain_only: str = typer.Option("", "--explain-only", hidden=True),  # `--explain KEYS` arrives as this
    no_progress: bool = switch("--no-progress", help="No progress bar (for logs and subprocesses)."),
    num_processes: Optional[int] = options.NUM_PROCESSES,
    nnodes: Optional[int] = options.NNODES,
    node_rank: Optional[int] = options.NODE_RANK,
    master_addr: Optional[str] = options.MASTER_ADDR,
    master_port: Optional[int] = options.MASTER_PORT,
    no_fit_check: bool = options.NO_FIT_CHECK,
    gpu_memory: Optional[float] = options.GPU_MEMORY,
    as_json: bool = switch("--json", help="With --dry-run: the plan as one JSON object on stdout."),
):
    """Fine-tune a LoRA adapter on a 4-bit base: `qlora-app train --help` lists the methods (app/config/methods/)."""
    apply_local_only(local_only)  # before anything imports huggingface_hub (it reads the flags at import)
    flags = flags_layer({name: value for name, value in locals().items() if name in CLI_FLAGS})

    if resume is not None and (preset or config):
        raise UserError("--resume reuses the run's own config.yaml; drop --preset/--config (use --set to change keys)")
    base, source = {}, "the defaults"
    if resume is not None:
        base, source = load_yaml_file(lookup.require_run_dir(resume) / layout.CONFIG), "the run's config.yaml"
    elif config is not None:
        base, source = load_config_file(config), f"config {config}"
    elif preset is not None:
        base, source = load_preset(preset), f"preset {preset}"
    cfg = build_config(base, flags, list(set_ or []), source=source)
    apply_local_only(cfg.runtime.local_only)  # a config or resumed run may say it too; still before any hub import
    explain = explain or bool(explain_only)
    if (explain or gpu_memory is not None or as_json) and not dry_run:
        used = "--explain" if explain else "--gpu-memory" if gpu_memory is not None else "--json"
        raise UserError(f"{used} goes with --dry-run: qlora-app train --dry-run {used} [your options]")
    if dry_run:
        print_plan(cfg, explain_only if explain else None, console, err_console, gpu_gb=gpu_memory,
                   as_json=as_json)
        return

    session = Session(cfg, resume=resume, run_dir=run_dir, progress=not no_progress and console.is_terminal,
                      console=console)
    d = launcher.launch(session, list(set_ or []), max_steps) if wants_launcher(cfg.runtime) else session.run()
    if is_worker():  # the launcher prints the summary once; a worker's 0 keeps torchrun from reporting a failure
        return
    print_run_summary(d, console)
    raise typer.Exit(session.exit_code)


# ---------------------------------------------------------------------------------------------- data and reward


@app.command(cls=Command)
def inspect(
    dataset: str = typer.Argument(..., help="Hub id, local file or built-in name."),
    dataset_config: Optional[str] = typer.Option(None, "--dataset-config", help="Hub dataset config name (as "
                                                                                "train's --dataset-config)."),
    split: Optional[str] = typer.Option(None, help="Split to inspect (default train)."),
    prompt_field: Optional[str] = typer.Option(None),
    reference_field: Optional[str] = typer.Option(None),
    chosen_field: Optional[str] = typer.Option(None, help="Preference data: the preferred answer's column."),
    rejected_field: Optional[str] = typer.Option(None, help="Preference data: the rejected answer's column."),
    label_field: Optional[str] = typer.Option(None, help="Unpaired answers (KTO): the good / bad column."),
    local_only: bool = switch("--local-only"),
    as_json: bool = switch("--json", help="One JSON object on stdout."),
):
    """Show which fields will be used as prompt / reference (chosen / rejected for preference pairs), with reasons
    and sample rows."""
    apply_local_only(local_only)

    raise typer.Exit(run_inspect(dataset, dataset_config, split, prompt_field, reference_field, local_only, as_json,
                                 chosen_field=chosen_field, rejected_field=rejected_field, label_field=label_field))


@app.command(cls=Command)
def score(
    completion: Optional[str] = typer.Option(None, help="A model completion to score."),
    reference: Optional[str] = typer.Option(None, help="The reference answer."),
    file: Optional[str] = typer.Option(None, help="JSONL with rows {completion, reference}."),
    as_json: bool = switch("--json", help="One JSON line per input."),
    reward: Optional[List[str]] = typer.Option(None, help="Extra reward 'module:function' or 'file.py:function' "
                                                          "(as train --reward)."),
    set_: Optional[List[str]] = SetOpt,
):
    """Score completions with the shaped reward and explain each component."""
    raise typer.Exit(run_score(completion, reference, file, as_json, list(set_ or []), list(reward or [])))


# ------------------------------------------------------------------------------------------- compare, demo, ui


@app.command(cls=Command)
def compare(
    run: Optional[Path] = typer.Argument(None, help="Run directory (or bare run name) or adapter directory."),
    adapter: Optional[Path] = typer.Option(None, help="The same as RUN, as an option."),
    model: Optional[str] = typer.Option(None, help="Base model (default: read from the adapter/run config)."),
    dataset: Optional[str] = typer.Option(None, help="Dataset for held-out rows (default: the run's)."),
    num_samples: Optional[int] = typer.Option(None, help=f"Held-out rows ({DEFAULT_SAMPLES} without --prompt)."),
    prompt: Optional[List[str]] = typer.Option(None, help="A prompt to compare (repeatable)."),
    prompt_field: Optional[str] = typer.Option(None), reference_field: Optional[str] = typer.Option(None),
    max_new_tokens: int = typer.Option(128),
    temperature: float = typer.Option(0.0, help="0 = greedy (reproducible)."),
    batch_size: int = typer.Option(16),
    seed: int = typer.Option(0),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the comparison as JSON."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML page."),
    local_only: bool = switch("--local-only"),
):
    """Base vs adapter on held-out rows or your prompts, scored with the shaped reward."""
    apply_local_only(local_only)
    raise typer.Exit(run_compare_cli(
        adapter=one_target(run, adapter), model=model, dataset=dataset, num_samples=num_samples, prompts=prompt or [],
        prompt_field=prompt_field, reference_field=reference_field, max_new_tokens=max_new_tokens,
        temperature=temperature, batch_size=batch_size, seed=seed, json_out=json_out, html_out=html_out,
        local_only=local_only, console=console,
    ))


@app.command(cls=Command)
def demo(
    output_dir: Path = typer.Option(Path("demo-runs"), help="Where the run and compare.json go."),
    quick: bool = options.DEMO_QUICK,
    seed: int = typer.Option(42, help="One seed for training, sampling and evaluation."),
    method: Optional[str] = options.DEMO_METHOD,
    tools: bool = switch("--tools", help="GRPO with the built-in calculator tool: a tiny tool-calling model learns "
                                         "to call it right on two-digit word problems (arith-calc)."),
    images: bool = switch("--images", help="SFT of a tiny vision-language model (4-bit) on built-in images: it "
                                           "learns to name the colour of a shape."),
    gguf_teacher: bool = switch("--gguf-teacher", help="--method distill: the teacher exported to a Q4_K_M GGUF and "
                                                       "run by llama.cpp in a child process (never in training "
                                                       "memory); its top-k log-probabilities are the signal."),
):
    """Offline end-to-end demo on CPU: 4-bit QLoRA + GRPO (or DPO, KTO, distillation) on built-in arithmetic, then
    base vs adapter."""
    apply_local_only(True)  # the demo never needs the network, and must not try
    use_free_cores(note=lambda ln: console.print(f"[yellow]note:[/] {escape(ln)}"))  # pairs, proofs: free cores
    try:
        run_chosen_demo(output_dir, quick=quick, console=console, seed=seed, method=method, tools=tools,
                        images=images, gguf_teacher=gguf_teacher)
    except KeyboardInterrupt as e:  # Ctrl-C: stopped, not a success (130 = 128 + SIGINT, what shells report)
        if not isinstance(e, DemoInterrupted):
            err_console.print("demo interrupted")
        raise typer.Exit(130) from None


@app.command(cls=Command)
def ui(
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(7860),
    share: bool = switch("--share", help="Create a public Gradio share link (off by default)."),
    auth: Optional[str] = typer.Option(None, help="USER:PASS required to open the UI."),
    runs_dir: Path = typer.Option(Path("runs"), help="Runs folder to show and write to (demo-runs/ beside it is "
                                                     "shown too)."),
    local_only: bool = switch("--local-only"),
    open_browser: bool = switch("--open", help="Open the UI in a browser once it serves."),
):
    """Local web UI: train with live curves and Stop, browse runs, compare base vs adapter."""
    apply_local_only(local_only)
    no_telemetry()  # before gradio is imported: it reads these at import time
    launch(host=host, port=port, share=share, auth=auth, runs_dir=runs_dir, local_only=local_only,
           open_browser=open_browser)


@app.command(cls=Command)
def serve(
    run: Path = typer.Argument(..., help="Run directory (or bare run name) or adapter directory."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default; beyond it needs --api-key)."),
    port: int = typer.Option(8000),
    api_key: Optional[str] = typer.Option(None, help="Key clients send as 'Authorization: Bearer KEY' (or "
                                                     "QLORA_APP_API_KEY)."),
    model: Optional[str] = typer.Option(None, help="Base model, when the adapter does not say which."),
    engine: str = typer.Option("builtin", help="builtin (CPU or GPU, one request at a time) or vllm (CUDA, vllm "
                                               "installed: batched)."),
    local_only: bool = switch("--local-only"),
    fetch_internal_urls: bool = switch("--fetch-internal-urls", help="Let a request's image_url reach loopback, "
                                       "private and link-local addresses (off: public ones only)."),
):
    """The run's adapter, and its base beside it, over the OpenAI API (/v1/chat/completions, /v1/completions)."""
    apply_local_only(local_only)
    key = serve_key(api_key)
    check_serving(host, port, key)  # exposure without a key, a busy port: said before the model loads
    if engine not in ("builtin", "vllm"):
        raise UserError(f"--engine {engine} is not an engine here; pass builtin or vllm")
    if engine == "vllm":
        raise typer.Exit(serve_with_vllm(run, host, port, key, model, say=console.print))
    use_free_cores()  # this command's CPU threads: the cores other processes leave free (OMP_NUM_THREADS fixes it)
    engine = Engine(run, local_only=local_only, model=model, fetch_internal=fetch_internal_urls)
    console.print(banner(engine, host, port, key), highlight=False, soft_wrap=True)
    server(engine, host, port, key).run()


# ------------------------------------------------------------------------------------------- presets and runs


@presets_app.command("list", cls=Command)
def presets_list():
    """All presets with their method, model and dataset."""
    t = Table(title="presets", show_lines=True)
    if console.width >= 140:
        for col in ("name", "method", "model", "dataset"):
            t.add_column(col, no_wrap=True, overflow="ellipsis", max_width=None if col != "dataset" else 24)
        t.add_column("what", ratio=1, min_width=24)
        for p in list_presets():
            t.add_row(p["name"], p["method"], p["model"], p["dataset"], p["description"])
    else:  # a narrow terminal: the name and what it is for come first, never dropped
        t.add_column("preset", no_wrap=True)
        t.add_column("what", ratio=1, overflow="fold")
        for p in list_presets():
            facts = " · ".join(str(p[k]) for k in ("method", "model", "dataset") if p.get(k))
            t.add_row(p["name"], f"{p['description']}\n[dim]{facts}[/]")
    console.print(t)


@presets_app.command("show", cls=Command)
def presets_show(name: str = typer.Argument(..., help="Preset name or YAML file.")):
    """Print a preset's YAML."""
    sys.stdout.write(preset_path(name).read_text())


@runs_app.command("list", cls=Command)
def runs_list(folder: Optional[Path] = typer.Argument(None, help="Runs folder (same as --output-dir)."),
              output_dir: Optional[Path] = typer.Option(None, help="Runs folder (default: runs/ and demo-runs/)."),
              memory: bool = switch("--memory", help="Each GPU run's memory estimate beside its measured peak."),
              as_json: bool = switch("--json", help="One JSON object per run, one per line.")):
    """Runs with status, method, model, dataset and final metrics."""
    chosen = folder or output_dir
    if chosen is not None and not chosen.is_dir():
        raise UserError(f"'{chosen}' is not a folder; pass the folder your runs are in (default: runs)")
    folders = [chosen] if chosen is not None else [Path(f) for f in layout.RUN_FOLDERS if Path(f).is_dir()]
    for f in folders or [Path(layout.RUN_FOLDERS[0])]:
        if as_json:
            for d in lookup.list_runs(f):
                sys.stdout.write(json.dumps(run_summary(d)) + "\n")
        else:
            print_runs(f, console, memory)


@runs_app.command("show", cls=Command)
def runs_show(run: Path = typer.Argument(..., help="Run directory."), config: bool = switch("--config", help="Print "
              "its whole config.yaml too.")):
    """A run's status, curves, what its diagnosis said and its proof; --config: its config.yaml."""
    d = lookup.require_run_dir(run)
    console.print(f"[bold]{escape(str(d))}[/]")
    print_run_summary(d, console, (d / layout.CONFIG).read_text() if config else None)
    console.print(f"config: {escape(str(d / layout.CONFIG))} (--config prints it)", highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------------- export and setup


for _command in (pairs.pairs, ship.chat, ship.export, ship.push, ship.prefetch):
    app.command(cls=Command)(_command)
app.command("eval", cls=Command)(evaluate.eval_)  # `eval` itself is Python's builtin


@app.command(cls=Command)
def doctor(run: Optional[Path] = typer.Argument(None, help="A run (folder or name): why its reward is or is not "
                                                           "flat, from its logged steps.")):
    """What this machine can do: GPU, bf16, libraries, offline settings; with a RUN, what its curves show."""
    if run is not None:
        report_run(run, console)
        return
    report(console)


def run_args(argv: list[str]) -> None:
    """The command ``argv`` names; a user error is one red line and its exit code, never a traceback (SystemExit)."""
    try:
        app(args=explain_value(argv))
    except UserError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)


def main() -> None:
    """Entry point (`qlora-app`, `python -m app.cli`): the process-wide settings, then the command."""
    start_command()  # once, before any command imports a library (app/host/process.py)
    run_args(sys.argv[1:])
