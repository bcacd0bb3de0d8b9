"""``qlora-app inspect DATASET``: what the app will use as prompt and reference, why, and three sample rows.

The point is trust: a user sees the detected roles with the reason for each *before* spending an hour of GPU time,
and the exact prompt text the model will get. ``--json`` prints one JSON object (the ``Detection``) for scripts.
"""

from __future__ import annotations

import json
import sys

from app.config.data_section import DataConfig
from app.config.schema import TrainingConfig
from app.data import build_splits
from app.data.convert import prompt_text, reference_text
from app.data.images import images_folder, sample_problems
from app.data.preference import pair_of
from app.data.detect import DataError, flatten_row
from app.data.preview import inspect_detection, peek
from app.rewards.match import choose_for as choose_match

SAMPLES = 3
CELL = 300  # characters per sample cell: enough to recognise a row, short enough for a terminal


def _short(text: str | None) -> str:
    if text is None:
        return "-"
    text = text.strip()
    return text if len(text) <= CELL else text[: CELL - 1] + "…"


def reference_match(rows, det) -> tuple[str, str] | None:
    """(mode, why) the reward's reference component would compare with on these rows (reference_match auto), as a
    run's plan decides it; None without a reference column."""
    if det.reference_field is None or not len(rows):
        return None
    return choose_match(rows, lambda row: reference_text(row, det))


def run_inspect(dataset: str, config_name: str | None, split: str | None, prompt_field: str | None,
                reference_field: str | None, local_only: bool, as_json: bool, **pair_fields) -> int:
    """Print the detection; returns the exit code. Bad input raises DataError (the CLI maps it to exit 2).
    ``pair_fields``: chosen_field / rejected_field overrides of preference data."""
    det, rows, split_name = inspect_detection(dataset, config_name, split, prompt_field, reference_field, local_only,
                                              **pair_fields)
    match = reference_match(rows, det)
    pictures = (check_pictures(dataset, config_name, split, det, local_only)
                if det.image_field else None)  # read as a run reads them: what train would refuse, said here
    code = 2 if pictures and pictures[1] else 0
    leaks = (held_out_leaks(dataset, config_name, split, prompt_field, reference_field, local_only, **pair_fields)
             if det.num_rows is not None and det.num_rows <= LEAK_ROWS else None)  # inspect reads a big file boundedly
    if as_json:
        out = {**det.to_dict(), **({"reference_match": {"mode": match[0], "why": match[1]}} if match else {}),
               **({"leaks": leaks} if leaks is not None else {}),
               **({"images_checked": {"pictures": pictures[0], "problems": pictures[1], "rows": pictures[2],
                                      "of_rows": det.num_rows}} if pictures else {})}
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return code

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text  # dataset text is shown literally: '[1]' or '[bold]' in a row is not markup

    console = Console()
    size = f"{det.num_rows:,} rows" if det.num_rows is not None else "row count not computed (large file)"
    console.print(f"[bold]{escape(dataset)}[/] split [bold]{escape(split_name)}[/]: {size}, "
                  f"{len(det.columns)} column{'s' if len(det.columns) != 1 else ''} ({escape(', '.join(det.columns))})")
    roles = Table(title="Detected fields", show_lines=True)
    roles.add_column("role", style="bold")
    roles.add_column("field", style="cyan")
    roles.add_column("why")
    for role, field, why in _role_rows(det, match, pictures):
        roles.add_row(role, Text(field), Text(why))
    console.print(roles)

    samples = Table(title=f"{min(SAMPLES, len(rows))} sample rows as the model will see them", show_lines=True)
    samples.add_column("#", justify="right")
    samples.add_column("prompt")
    samples.add_column("reference")
    pairs = det.format == "preference"
    if pairs:
        samples.add_column("chosen")
        samples.add_column("rejected")
    for i, row in enumerate(rows[:SAMPLES]):
        cells = [Text(_short(prompt_text(row, det))), Text(_short(reference_text(row, det)))]
        if pairs:
            pair = pair_of(row, det)
            cells += [Text(_short(pair.chosen if pair else None)), Text(_short(pair.rejected if pair else None))]
        samples.add_row(str(i), *cells)
    console.print(samples)
    if leaks is None and (det.num_rows is None or det.num_rows > LEAK_ROWS):
        console.print(f"[dim]held-out: not checked for repeats of training rows here (over {LEAK_ROWS:,} rows: inspect "
                      "reads a sample); the dry run and the run check them[/]", highlight=False)
    if leaks is not None:
        said = leaks.get("line") or (f"none of the {leaks['heldout']} held-out rows repeats a training row (exactly "
                                     "once normalised, or nearly)")
        console.print(f"[{'yellow' if leaks.get('line') else 'dim'}]held-out: {escape(said)}[/]", highlight=False)
    more = " / --chosen-field NAME / --rejected-field NAME" if pairs else ""
    console.print(f"[dim]Wrong field? Override with --prompt-field NAME / --reference-field NAME{more}.[/]")
    if code:
        first, rest = pictures[1][0], len(pictures[1]) - 1
        console.print(f"[red]train would refuse this data:[/] {escape(first)}"
                      + (f" ({rest} more of the checked rows too)" if rest else ""), highlight=False)
    return code


LEAK_ROWS = 50_000  # inspect checks the held-out rows for leaks up to this many rows (it reads them all to do so)


def held_out_leaks(dataset: str, config_name, split, prompt_field, reference_field, local_only: bool,
                   **pair_fields) -> dict | None:
    """The held-out rows a run on this data would hold out, and how many of them repeat a training row (with the
    default seed: app/data/leaks.py), with the line a run says; None where the splits cannot be built here."""
    fields = {k: v for k, v in pair_fields.items() if k in DataConfig.model_fields and v is not None}
    try:
        dc = DataConfig(dataset=dataset, config_name=config_name, split=split or "train", prompt_field=prompt_field,
                        reference_field=reference_field, **fields)
        _, _, det = build_splits(dc, TrainingConfig().seed, local_only)
    except (DataError, ValueError):
        return None
    return {**det.leaks, "line": det.reasons.get("leaks")} if det.leaks else None


PICTURE_ROWS = 2000  # inspect reads every picture of a dataset up to this many rows; of a larger one, these first


def check_pictures(dataset: str, config_name, split, det, local_only: bool) -> tuple[int, list[str], int]:
    """(pictures read, problems, rows checked): every row's pictures of a small dataset (the first PICTURE_ROWS of a
    larger one), each read and decoded as a run reads it."""
    rows, _, _, _ = peek(dataset, config_name, split, PICTURE_ROWS, local_only)
    rows = [flatten_row(r) for r in rows] if any("." in c for c in det.columns) else rows
    read, problems = sample_problems(rows, det.image_field, images_folder(dataset), local_only, limit=PICTURE_ROWS)
    return read, problems, min(len(rows), PICTURE_ROWS)


def _checked_rows(checked: int, total: int | None) -> str:
    """Which rows' pictures inspect read: all of them, or the first N and their share."""
    if total is not None and checked >= total:
        return f"all {total:,} rows"
    share = f", {checked / total:.0%} of {total:,}" if total else ""
    return f"the first {checked:,} rows{share}"


def _role_rows(det, match, pictures=None) -> list[tuple[str, str, str]]:
    """The detected fields table's rows: (role, column, why), in the order the table shows them."""
    rows_ = [("format", det.format, det.reasons.get("format", ""))]
    if det.messages_field:
        rows_.append(("messages", det.messages_field, det.reasons.get("messages_field", "")))
    if det.format == "preference" and not det.prompt_field:
        rows_.append(("prompt", "-", det.reasons.get("prompt_field", "")))
    elif det.messages_field and not det.prompt_field:  # chat data: the prompt is part of the conversation column
        rows_.append(("prompt", det.messages_field, "the turns before the last assistant turn of "
                                                    f"'{det.messages_field}'"))
    else:
        rows_.append(("prompt", det.prompt_field or "-", det.reasons.get("prompt_field", "")))
    rows_.append(("reference", det.reference_field or "-", det.reasons.get("reference_field", "")))
    if match:
        rows_.append(("reference match", match[0], f"{match[1]} (the reward's reference component; "
                                                    "--set reward.reference_match=... sets another)"))
    if det.context_fields:
        rows_.append(("context", ", ".join(det.context_fields), det.reasons.get("context_fields", "")))
    if det.solution_field:
        rows_.append(("SFT target", det.solution_field, "worked solution used as the SFT completion"))
    for role in ("chosen_field", "rejected_field"):
        if getattr(det, role):
            rows_.append((role.removesuffix("_field"), getattr(det, role), det.reasons.get(role, "")))
    if det.pair_fields:
        rows_.append(("answers", ", ".join(det.pair_fields), "two answers; the better one is the chosen"))
        ranker = det.preference_field
        rows_.append(("ranked by", ", ".join(ranker) if isinstance(ranker, list) else ranker,
                      det.reasons.get("preference_field", "")))
    if det.desirable_field:
        rows_.append(("label", det.desirable_field, det.reasons.get("desirable_field", "")))
    if det.image_field:
        lo, hi = det.images_per_row or (1, 1)
        count = f"{lo}" if lo == hi else f"{lo}-{hi}"
        read = (f"; {pictures[0]} picture(s) of {_checked_rows(pictures[2], det.num_rows)} read as a run reads "
                "them: " + (f"{len(pictures[1])} row(s) a run would refuse (below)" if pictures[1] else "all readable")
                if pictures else "")
        rows_.append(("images", det.image_field, f"{det.reasons.get('image_field', '')}; {count} per row{read} "
                                                 "(training needs a vision-language model: docs/datasets.md#images)"))
    return rows_
