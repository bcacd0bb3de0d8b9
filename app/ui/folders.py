"""Which runs the UI shows: those in its runs folder, and those of the demo (`qlora-app demo` writes demo-runs/ beside
runs/ in the same working folder), so a run started from the CLI's other default folder is not missing from the
Runs, Compare and Chat tabs. A run is named by its folder name; one outside the runs folder by 'demo-runs/NAME'.

Owns the run labels and their paths. Must not write anything (no Gradio here).
"""

from __future__ import annotations

from pathlib import Path

from app.errors import UserError
from app.run import layout, lookup


def other_folders(runs_dir: str | Path) -> list[Path]:
    """The demo's folder beside the runs folder, when it is there and is not the runs folder itself."""
    runs = Path(runs_dir).resolve()
    demo = runs.parent / layout.RUN_FOLDERS[1]
    return [demo] if demo.is_dir() and demo != runs else []


def shown_runs(runs_dir: str | Path) -> list[tuple[str, Path]]:
    """(label, folder) of every run the UI shows, newest first within each folder."""
    out = [(d.name, d) for d in lookup.list_runs(runs_dir)]
    for folder in other_folders(runs_dir):
        out += [(f"{folder.name}/{d.name}", d) for d in lookup.list_runs(folder)]
    return out


def run_path(runs_dir: str | Path, label: str) -> Path:
    """The folder of a run the UI showed as ``label``; a label it did not show is one line."""
    for shown, d in shown_runs(runs_dir):
        if shown == label:
            return d
    raise UserError(f"run '{label}' is not in {runs_dir} (or demo-runs/ beside it); refresh the Runs tab and pick one "
                    "it shows")
