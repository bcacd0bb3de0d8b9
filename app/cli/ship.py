"""`qlora-app chat`, `export`, `push`, `prefetch`: what a trained adapter does outside training (registered on the
main Typer app by app.cli). Light imports only, as in app.cli."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from app.cli.options import switch
from app.data.images import open_image
from app.errors import UserError
from app.ask.asking import check_generation
from app.eval.chat import Chat
from app.export.base_gguf import export_base
from app.export.bundle import export_run
from app.export.prefetch import prefetch as do_prefetch
from app.export.push import push_run
from app.export.quantize import DEFAULT as GGUF_DEFAULT
from app.host.offline import apply_local_only
from app.host.threads import use_free_cores

console = Console()
err_console = Console(stderr=True)

CHAT_HELP = ("commands: /adapter, /base, /both (who answers), /system (show it), /system TEXT (set it), "
             "/system none (clear it), /reset (forget the conversation), /help, /exit")


# ---------------------------------------------------------------------------------------------------------- chat


def chat(
    run: Path = typer.Argument(..., help="Run directory (or bare run name) or adapter directory."),
    message: Optional[str] = typer.Option(None, "--message", "-m", help="Answer this one message and exit."),
    base: bool = switch("--base", help="The base model answers (adapter off)."),
    both: bool = switch("--both", help="Adapter and base both answer each message."),
    system: Optional[str] = typer.Option(None, "--system", help="System prompt (default: the run's)."),
    temperature: float = typer.Option(0.0, help="0 = greedy: the reply compare gives for the same prompt."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    seed: int = typer.Option(0, help="Seed for sampling (temperature > 0)."),
    as_json: bool = switch("--json", help="With --message: print {\"adapter\": ..., \"base\": ...}."),
    local_only: bool = switch("--local-only"),
    image: Optional[List[Path]] = typer.Option(None, "--image", help="A picture the conversation is about (a run "
                                                                      "trained on images); repeat for several."),
):
    """Talk to a trained adapter in the terminal, with its base beside it on /both or --both."""
    apply_local_only(local_only)
    if base and both:
        raise UserError("--base and --both exclude each other; pass one (adapter alone is the default)")
    if as_json and message is None:
        raise UserError("--json goes with --message TEXT (one-shot); drop it for a conversation")
    check_generation(temperature, max_new_tokens)  # before the model loads
    sides = ["adapter", "base"] if both else ["base"] if base else ["adapter"]
    pictures = [open_image(p) for p in image or []]  # a missing or broken file: one line before the model loads
    use_free_cores()  # this command's CPU threads: the cores other processes leave free (OMP_NUM_THREADS fixes it)
    with console.status("loading the model", spinner="dots") if console.is_terminal else _nothing():
        session = Chat(run, local_only=local_only)
    if system is not None:
        session.system = system or None
    session.set_images(pictures)
    note = session.picture_note()
    if note:  # on stderr: a --json reply on stdout stays one object
        err_console.print(f"note: {note} (--image PICTURE gives it one)", style="yellow", highlight=False)
    gen = dict(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    if message is not None:
        replies = {s: session.reply(s, message, **gen, on_text=None if as_json or both else _echo) for s in sides}
        if as_json:
            sys.stdout.write(json.dumps(replies, ensure_ascii=False) + "\n")
        elif both:
            for s in sides:
                console.print(f"[bold]{s}[/]: {escape(session.shown(s, replies[s]))}", highlight=False)
        else:
            sys.stdout.write("\n")
        return
    _conversation(session, sides, gen)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _echo(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


def _conversation(session, sides: list[str], gen: dict) -> None:
    console.print(f"chatting with [bold]{session.adapter_dir}[/] on {session.base_name}", highlight=False)
    console.print(f"system prompt: {session.system or '(none)'}", highlight=False)
    console.print(CHAT_HELP, style="dim", highlight=False)
    while True:
        try:
            line = input(f"\n[{'+'.join(sides)}] you> ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            cmd, _, arg = text.partition(" ")
            if cmd in ("/exit", "/quit"):
                return
            if cmd in ("/adapter", "/base", "/both"):
                sides[:] = ["adapter", "base"] if cmd == "/both" else [cmd[1:]]
            elif cmd == "/reset":
                session.reset()
                console.print("conversation forgotten", style="dim")
            elif cmd == "/help":
                console.print(CHAT_HELP, style="dim", highlight=False)
            elif cmd == "/system" and not arg.strip():  # shows it; clearing it is asked for in words
                console.print(f"system prompt: {session.system or '(none)'} (/system TEXT sets it, /system none "
                              "clears it)", style="dim", highlight=False)
            elif cmd == "/system":
                session.system = None if arg.strip().lower() == "none" else arg.strip()
                session.reset()
                console.print(f"system prompt: {session.system or '(none)'}; conversation restarted", style="dim",
                              highlight=False)
            else:
                console.print(f"unknown command {cmd}; {CHAT_HELP}", style="yellow", highlight=False)
            continue
        dropped = session.dropped
        for s in sides:
            sys.stdout.write(f"{s}> ")
            try:
                session.reply(s, text, **gen, on_text=_echo)
            except UserError as e:
                err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
            except KeyboardInterrupt:
                console.print(" [dim](stopped)[/]")
                break
            sys.stdout.write("\n")
        if session.dropped > dropped:
            console.print("(the oldest turns were left out: the conversation outgrew the model's context; /reset "
                          "starts over)", style="dim")


# ---------------------------------------------------------------------------------------------------------- export


def export(
    run: Optional[Path] = typer.Argument(None, help="Run directory (or bare run name) or adapter directory."),
    base: Optional[str] = typer.Option(None, "--base", help="Instead of a run: a base model (hub id, folder or a "
                                       "shipped model) as a GGUF (--format gguf), the file a gguf-lora adapter loads "
                                       "beside."),
    out: Optional[Path] = typer.Option(None, help="Destination folder (new or empty; --force to write into a full "
                                                  "one). Default: RUN/exports/FORMAT."),
    fmt: Optional[str] = typer.Option(None, "--format", help="adapter (default), merged, gguf, gguf-lora (the adapter "
                                      "alone in llama.cpp's LoRA format, for the base's own GGUF) or ollama."),
    merge: bool = switch("--merge", help="Same as --format merged."),
    outtype: Optional[str] = typer.Option(
        None, "--outtype", help=f"gguf / ollama: the GGUF's type, {GGUF_DEFAULT} (the default: what Ollama and LM "
        "Studio users run), q4_k_s, q5_k_m, q5_k_s, q6_k, q8_0, f16, bf16, f32 or a smaller k-quant; several at once "
        "from one merge: q4_k_m,q8_0 (the first is the Modelfile's). gguf-lora: f16 (the default), bf16, q8_0 or "
        "f32."),
    dtype: Optional[str] = typer.Option(None, help="merged: bf16 (default), fp16 or fp32."),
    merge_onto: str = typer.Option("trained", "--merge-onto", help="merged / gguf / ollama: trained (default: the "
                                   "weights the adapter was trained on, a 4-bit run's NF4 base dequantized, so the "
                                   "export answers as the adapter the proof measured) or original (the base's own "
                                   "16-bit weights)."),
    measure_rows: Optional[int] = typer.Option(None, "--measure-rows", min=0, help="merged / gguf / ollama: the run's "
                                               "proof rows each exported model is asked again, to state its own "
                                               "accuracy (default: all of them; 0: none)."),
    force: bool = switch("--force", help="Write into a non-empty --out (same names are replaced)."),
    local_only: bool = switch("--local-only"),
):
    """Export the adapter, merged 16-bit weights, a GGUF (llama.cpp), the adapter as a llama.cpp LoRA GGUF, or GGUF +
    Modelfile (Ollama), with a model card."""
    apply_local_only(local_only)
    if (run is None) == (base is None):
        raise UserError("export takes a run (qlora-app export RUN) or a base model (qlora-app export --base MODEL "
                        "--format gguf), one of the two")
    if base is not None:
        if merge or fmt not in (None, "gguf"):
            raise UserError(f"--base exports a base model as a GGUF; drop --format {fmt or 'merged'} (or pass "
                            "--format gguf)")
        with console.status("exporting the base (gguf)", spinner="dots") if console.is_terminal else _nothing():
            res = export_base(base, out, outtype=outtype, force=force, local_only=local_only)
        console.print(f"[green]exported[/] the base as gguf ({', '.join(res.files.values())}) to", highlight=False)
        console.print(str(res.out), highlight=False, soft_wrap=True)
        return
    if merge and fmt not in (None, "merged"):
        raise UserError(f"--merge means --format merged; drop one of --merge and --format {fmt}")
    fmt = "merged" if merge else fmt or "adapter"
    with console.status(f"exporting ({fmt})", spinner="dots") if console.is_terminal else _nothing():
        res = export_run(run, out, fmt=fmt, outtype=outtype, dtype=dtype, force=force, local_only=local_only,
                         onto=merge_onto, measure_rows=measure_rows)
    console.print(f"[green]exported[/] {fmt} ({', '.join(res.files.values())}) to", highlight=False)
    console.print(str(res.out), highlight=False, soft_wrap=True)  # on its own line: a path to copy, never cut
    for n in res.notes:
        console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
    if res.ollama_command:
        console.print("load it into Ollama with:")
        console.print(res.ollama_command, highlight=False, soft_wrap=True)


def push(
    run: Path = typer.Argument(..., help="Run directory (or bare run name) or adapter directory."),
    repo: str = typer.Option(..., help="Hub repository id, e.g. you/my-model."),
    fmt: str = typer.Option("adapter", "--format", help="adapter, merged, gguf or gguf-lora."),
    outtype: Optional[str] = typer.Option(None, "--outtype", help="gguf / gguf-lora: the GGUF's type(s), as export's "
                                          "--outtype."),
    private: bool = switch("--private", help="Create the repository as private."),
    dry_run: bool = switch("--dry-run", help="List what would be uploaded; upload nothing."),
    local_only: bool = switch("--local-only"),
):
    """Upload what `export` writes (model card included) to a Hugging Face Hub repository."""
    apply_local_only(local_only)
    res = push_run(run, repo, fmt=fmt, outtype=outtype, private=private, dry_run=dry_run, local_only=local_only)
    verb = "would upload" if dry_run else "uploaded"
    console.print(f"{verb} to {res['repo']} ({'private' if private else 'public'}):", highlight=False)
    for name, size in res["files"]:
        console.print(f"  {name}  ({size:,} bytes)", highlight=False)
    if res.get("url"):
        console.print(res["url"], highlight=False, soft_wrap=True)


def prefetch(
    model: Optional[str] = typer.Option(None, help="Model hub id to download into the HF cache."),
    dataset: Optional[str] = typer.Option(None, help="Dataset hub id to download into the HF cache."),
    dataset_config: Optional[str] = typer.Option(None, "--dataset-config"),
):
    """Download a model and/or dataset on a connected machine, for later --local-only runs."""
    if not model and not dataset:
        raise UserError("nothing to prefetch; pass --model ID and/or --dataset ID")
    for line in do_prefetch(model, dataset, dataset_config):
        console.print(line)
