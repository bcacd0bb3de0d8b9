#!/usr/bin/env python
"""Compare a base model with its LoRA adapter: the same command as `qlora-app compare`, as a standalone script.

    python compare_base_vs_lora.py --adapter runs/my-run --num-samples 20 --html compare.html

A thin wrapper: it mounts the CLI's own `compare` function as the script's only command, so the options, the
output and the exit codes (2 for a user error, one red line, no traceback) are the same as `qlora-app compare`.
"""

import sys


def main(argv: list[str] | None = None) -> None:
    import typer

    from app.cli import main as cli
    from app.cli.options import Command, Group
    from app.errors import UserError
    from app.host.process import start_command

    start_command()  # this script is a process entry, like `qlora-app`

    script = typer.Typer(cls=Group, add_completion=False, pretty_exceptions_enable=False)
    script.command(cls=Command)(cli.compare)  # a single command: options go straight after the script name
    try:
        script(args=argv, prog_name="compare_base_vs_lora.py")
    except UserError as e:  # the same handling as app/cli/main.py's main
        cli.err_console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
