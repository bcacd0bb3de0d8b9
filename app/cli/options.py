"""Option shapes shared by the command modules, `train`'s longer options, and the one reshaping of argv (`train
--explain KEYS`)."""

from __future__ import annotations

import typer
from typer.core import TyperCommand, TyperGroup


def switch(*flags: str, help: str | None = None, **kw):
    """An on/off option. Its type column stays empty: typer's rich help would show '<bool>' beside it
    ('--local-only <bool>'), which reads as if the switch took a value (an empty metavar is what typer shows)."""
    return typer.Option(False, *flags, help=help, metavar="", **kw)


def _no_type(option):
    if option is not None:
        option.metavar = ""  # --help is a switch too: no '<bool>' beside it
    return option


class Command(TyperCommand):
    """Every `qlora-app` command: help as typer draws it, with --help shown as the switch it is."""

    def get_help_option(self, ctx):
        return _no_type(super().get_help_option(ctx))


class Group(TyperGroup):
    """`qlora-app` itself and its command groups (presets, runs), drawn like ``Command``."""

    def get_help_option(self, ctx):
        return _no_type(super().get_help_option(ctx))


def explain_value(argv: list[str]) -> list[str]:
    """`train --explain lora`: a flag that may take a value, which click's options cannot be: the value moves to
    the hidden --explain-only."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--explain" and not out[i + 1].startswith("-"):
            out[i + 1:i + 2] = ["--explain-only", out[i + 1]]
    return out


# `train`'s options of a reward judge, a distillation teacher and a multi-process launch
JUDGE_URL = typer.Option(None, help="A judge in the reward: an OpenAI-compatible endpoint.")
JUDGE_MODEL = typer.Option(None, help="The judge: its name at --judge-url, else a local model.")
JUDGE_RUBRIC = typer.Option(None, help="The judge's rubric file ({prompt} {completion} ...).")
TEACHER = typer.Option(None, help="--method distill: the teacher, a model id or folder, or a qlora-app run (its base "
                                  "with its adapter), loaded beside the student; or never in training memory: a "
                                  ".gguf file (llama.cpp in a child process) or an http(s)://host:port/v1 endpoint.")
NUM_PROCESSES = typer.Option(None, "--num-processes", help="Processes on this machine (one per GPU); >1 runs torchrun "
                                                           "DDP.")
NNODES = typer.Option(None, "--nnodes", help="Machines taking part (multi-node).")
NODE_RANK = typer.Option(None, "--node-rank", help="This machine's index, 0..nnodes-1.")
MASTER_ADDR = typer.Option(None, "--master-addr", help="Address of the node-rank 0 machine.")
MASTER_PORT = typer.Option(None, "--master-port", help="Free TCP port on the master machine.")

# `demo`'s longer options
DEMO_QUICK = switch("--quick", help="A shorter run that still shows the lift: GRPO 60 steps, 100 held-out problems "
                                    "(25-60 s on 2 cores); dpo / kto: 800 prompts, 40 steps; distill: 40 steps; "
                                    "--tools: 40 steps; --images: the same training, 100 held-out pictures.")
DEMO_METHOD = typer.Option(None, help="grpo (learn from the reward; the default), dpo (pairs made with the reward, "
                                      "then DPO), kto (the same pairs, each a good and a bad answer, then KTO) or distill "
                                      "(a larger teacher's next-token distributions, on-policy); with --images: sft "
                                      "(default) or grpo.")

NO_FIT_CHECK = switch("--no-fit-check", help="Train even when the memory estimate says the run cannot fit the GPU.")
GPU_MEMORY = typer.Option(None, "--gpu-memory", metavar="GB", help="With --dry-run: plan the run for a CUDA card of "
                                                                   "this many GB (from any machine).")
