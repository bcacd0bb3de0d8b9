"""`qlora-app pairs`: a preference dataset made by sampling a model and scoring its answers with the run's reward
(app/synth/pairs.py), registered on the main Typer app by app.cli. Light imports only, as in app.cli."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from app.cli.options import switch
from app.config.build import build_config, load_config_file
from app.config.flags import flags_layer
from app.config.presets import load_preset
from app.errors import UserError
from app.synth.pairs import PairsRequest, make_pairs
from app.host.offline import apply_local_only
from app.host.threads import use_free_cores
from app.model.pair import find_target

console = Console()


def pairs(
    out: Path = typer.Option(..., "--out", help="New folder for the pairs (train.jsonl, test.jsonl)."),
    dataset: Optional[str] = typer.Option(None, help="The prompts: hub id, local file or 'arith' (default: the "
                                                     "preset's)."),
    model: Optional[str] = typer.Option(None, help="The model that answers (hub id or local folder)."),
    adapter: Optional[str] = typer.Option(None, help="Sample a trained run's adapter instead (run dir or adapter)."),
    preset: Optional[str] = typer.Option(None, help="Preset name or YAML: its data, model, reward and system "
                                                    "prompt."),
    config: Optional[Path] = typer.Option(None, help="A full config YAML (as written into run directories)."),
    dataset_config: Optional[str] = typer.Option(None, "--dataset-config", help="Hub dataset config name."),
    prompt_field: Optional[str] = typer.Option(None, help="Column holding the prompt (default: auto-detect)."),
    reference_field: Optional[str] = typer.Option(None, help="Column holding the reference answer (auto)."),
    samples: int = typer.Option(8, help="Answers sampled per prompt; the best and worst scored make the pair."),
    temperature: float = typer.Option(1.0, help="Sampling temperature (answers must differ to make pairs)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Longest answer, in tokens."),
    max_prompts: Optional[int] = typer.Option(None, "--max-prompts", help="Use at most this many training prompts."),
    max_heldout: int = typer.Option(200, "--max-heldout", help="Held-out prompts written to test.jsonl."),
    batch_size: int = typer.Option(16, "--batch-size", help="Prompts sampled at once (x samples answers)."),
    min_gap: float = typer.Option(0.25, "--min-gap", help="Least score difference between chosen and rejected; "
                                                          "closer answers are alike and make no pair."),
    local_only: bool = switch("--local-only", help="Air-gapped: local paths and HF cache only."),
    resume: bool = switch("--resume", help="Continue the pairs already written in --out."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key, e.g. reward.weights."
                                                                 "format=1 or data.system_prompt=..."),
    no_progress: bool = switch("--no-progress", help="No progress bar."),
):
    """Make preference pairs from a reward: sample each prompt, chosen = best-scored answer, rejected = worst."""
    base, source = ((load_config_file(config), f"config {config}") if config is not None else
                    (load_preset(preset), f"preset {preset}") if preset is not None else
                    _run_layer(adapter) if adapter else ({}, "the defaults"))
    flags = flags_layer({"dataset": dataset, "model": model, "dataset_config": dataset_config,
                         "prompt_field": prompt_field, "reference_field": reference_field,
                         "local_only": local_only})
    cfg = build_config(base, flags, list(set_ or []), source=source)
    apply_local_only(cfg.runtime.local_only)  # the flag, or the config's: before any hub import
    if not cfg.data.datasets:
        raise UserError("no prompts: pass --dataset (a hub id, a local file or 'arith') or a --preset that names one")
    req = PairsRequest(samples=samples, temperature=temperature, max_new_tokens=max_new_tokens,
                       max_prompts=max_prompts, max_heldout=max_heldout, batch_prompts=batch_size, min_gap=min_gap)

    def note(line: str) -> None:
        console.print(f"[yellow]note:[/] {escape(line)}")

    # sampling is generation on this machine's CPU threads: the cores other processes leave free, as training takes
    use_free_cores(cfg.runtime.threads, note)

    if no_progress or not console.is_terminal:
        manifest = make_pairs(cfg, out, req, adapter=adapter, resume=resume, note=note)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress("sampling and scoring", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console) as bar:
            task = bar.add_task("pairs", total=None)
            manifest = make_pairs(cfg, out, req, adapter=adapter, resume=resume, note=note,
                                  on_progress=lambda done, total: bar.update(task, completed=done, total=total))
    tr, te = manifest["splits"]["train"], manifest["splits"]["test"]
    console.print(f"{tr['pairs']} pairs from {tr['done']} training prompts ({tr['done'] - tr['pairs']} made none: "
                  f"their {samples} answers scored within {min_gap:g} of each other); {te['rows']} held-out rows, "
                  f"{te['pairs']} of them with "
                  f"a pair, in {escape(str(out))}", highlight=False)
    for line in hand_off(manifest, out, req):
        console.print(line, highlight=False, soft_wrap=True)


# One DPO optimizer step at the default batch (4 pairs x 2 accumulation steps): fewer pairs cannot train.
MIN_PAIRS = 8


def hand_off(manifest: dict, out: Path, req: PairsRequest) -> list[str]:
    """What to do next: the command that trains on the pairs with the model that answered (an online default would
    be another model), or, when too few prompts made a pair, what to change to get more."""
    tr = manifest["splits"]["train"]
    s = manifest["settings"]
    lines = [f"look: qlora-app inspect {shlex.quote(str(out))}"]
    if tr["pairs"] < max(MIN_PAIRS, tr["done"] // 5):
        lines.append(f"only {tr['pairs']} of {tr['done']} prompts made a pair: the {req.samples} answers of the others "
                     f"scored within --min-gap {req.min_gap:g} of each other. For more: --samples {req.samples * 2}, "
                     f"a higher --temperature (now {req.temperature:g}), a smaller --min-gap, or a model that gets "
                     "some of the answers right and some wrong")
    if tr["pairs"] < MIN_PAIRS:
        lines.append(f"{tr['pairs']} pairs is less than one DPO step ({MIN_PAIRS} pairs): make more before training")
        return lines
    cmd = ["qlora-app", "train", "--method", "dpo", "--dataset", str(out), "--model",
           s.get("sampled_with") or s["model"]]
    if s.get("adapter"):  # on-policy: DPO continues the adapter that answered
        cmd += ["--set", f"lora.init_from={s['adapter']}"]
    return lines + ["train: " + shlex.join(cmd)]


def _run_layer(adapter: str) -> tuple[dict, str]:
    """`pairs --adapter RUN` without --dataset: the run's own data (its fields, split, seed, reward) and base."""
    run_cfg = find_target(adapter).run_cfg
    if run_cfg is None:
        return {}, "the defaults"
    data = run_cfg.model_dump(mode="json")
    return ({"model": data["model"], "data": data["data"], "reward": data["reward"],
             "training": {"seed": data["training"]["seed"]}}, f"the run of {adapter}")
