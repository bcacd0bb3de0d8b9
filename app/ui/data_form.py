"""The Train form's dataset part, as plain functions (no Gradio imports): an uploaded file kept where the run can
read it, the fields detected with their reasons and sample rows, and the column overrides a dataset starts with.

Owns: reading a dataset for the form. Must not start runs or build the command line (app/ui/handlers.py does).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from app.config.flags import split_datasets
from app.data import prompt_text, reference_text, resolve_dataset
from app.data.images import IMAGE_SUFFIXES, IMAGES, attach_images, decoded, images_folder, thumbnails
from app.data.preference import pair_of
from app.data.splits import detect_dataset
from app.errors import UserError
from app.rewards.match import choose_for as choose_match
from app.ui.handlers import AUTO, FIELD_OVERRIDES, form_defaults, widget_value, widget_values

UPLOAD_DIR = "_uploads"  # inside the runs folder; not a run directory (no config.yaml), so `runs` ignores it
UPLOAD_TYPES = (".jsonl", ".json", ".csv", ".parquet")
ROLES = ("prompt_field", "reference_field", "messages_field", "chosen_field", "rejected_field", "pair_fields",
         "preference_field")


def save_upload(tmp_paths: str | list[str] | None, runs_dir: str | Path) -> str:
    """Copy a Gradio upload (temp files that are cleaned up later) into <runs>/_uploads/ so the training subprocess
    and later resumes can read it; returns the data file's path there. One data file, with its pictures when it
    has any: they go in one folder beside it (a row's picture is read beside the data file, by its path or by its
    name alone: app/data/images.py). Names carry a content hash: nothing is overwritten."""
    paths = [Path(p) for p in ([tmp_paths] if isinstance(tmp_paths, (str, Path)) else tmp_paths or []) if p]
    if not paths:
        raise UserError("no file uploaded")
    data = [p for p in paths if p.suffix.lower() in UPLOAD_TYPES]
    pictures = [p for p in paths if p.suffix.lower() in IMAGE_SUFFIXES]
    other = [p for p in paths if p not in data and p not in pictures]
    if other or len(data) != 1:
        named = other[0].name if other else ", ".join(p.name for p in data) or "only pictures"
        raise UserError(f"upload one dataset file ({', '.join(UPLOAD_TYPES)}), with its pictures if it has any; "
                        f"got {named}")
    src = data[0]
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in [src, *pictures])).hexdigest()[:10]
    root = Path(runs_dir) / UPLOAD_DIR
    folder = root / f"{src.stem}-{digest}" if pictures else root
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / (src.name if pictures else f"{src.stem}-{digest}{src.suffix.lower()}")
    for f, to in [(src, dest), *((p, folder / p.name) for p in pictures)]:
        if not to.exists():
            shutil.copyfile(f, to)
    return str(dest.resolve())


def fresh_overrides(dataset: str | None, preset: str | None, values: list, local_only: bool = False) -> list:
    """The column overrides ``values`` (FIELD_OVERRIDES order) as Detect uses them: one still holding the preset's
    own column while the dataset is another than the preset's is dropped (AUTO), as a change of dataset drops it.
    Detect clicked right after typing a path could otherwise run before that change and try the preset's column
    on the new file."""
    d = _preset_values(preset, local_only)
    if _same_dataset(dataset, d):
        return list(values)
    return [AUTO if widget_value(v) is not None and v == d.get(n) else v for n, v in zip(FIELD_OVERRIDES, values)]


def column_overrides(dataset: str | None, preset: str | None, local_only: bool = False) -> list[str]:
    """The column overrides (FIELD_OVERRIDES order) a dataset starts with: an override names a column of the dataset
    it was picked for, so another dataset (typed, pasted or uploaded) starts from auto-detection, while the preset's
    own dataset keeps the preset's columns."""
    d = _preset_values(preset, local_only)
    return [d[n] if _same_dataset(dataset, d) else AUTO for n in FIELD_OVERRIDES]


def _preset_values(preset: str | None, local_only: bool) -> dict:
    """The form's values of ``preset`` (none for no or a broken preset: nothing to keep)."""
    try:
        return widget_values(form_defaults(preset, local_only))
    except UserError:
        return {}


def _same_dataset(dataset: str | None, preset_values: dict) -> bool:
    return widget_value(dataset) is not None and widget_value(dataset) == widget_value(preset_values.get("dataset"))


def detect(dataset: str | None, config_name: str | None = None, prompt_field: str | None = None,
           reference_field: str | None = None, local_only: bool = False, n_samples: int = 3,
           chosen_field: str | None = None, rejected_field: str | None = None) -> dict:
    """The detected roles with reasons, the columns (for override dropdowns) and sample rows as the model will
    see them. Raises UserError (DataError) with the fix when the dataset cannot be read."""
    dataset = widget_value(dataset)
    if not dataset:
        raise UserError("enter a dataset first: a hub id, a local file path, 'arith', or upload a file")
    if len(split_datasets(dataset) or []) > 1:
        raise UserError("Detect fields reads one dataset: type one of the mix's to see its fields (when the run "
                        "starts, each is detected on its own)")

    dd = resolve_dataset(dataset, widget_value(config_name), local_only=local_only)
    split = "train" if "train" in dd else next(iter(dd))
    ds, det = detect_dataset(dd[split], widget_value(prompt_field), widget_value(reference_field),
                             chosen_field=widget_value(chosen_field), rejected_field=widget_value(rejected_field))
    rows = ds.select(range(min(n_samples, len(ds)))).to_list()
    samples = [{"prompt (as the model sees it)": _short(prompt_text(r, det)),
                "reference": _short(reference_text(r, det))} for r in rows]
    if det.format == "preference":  # the pair each row makes (None: the row makes none and is skipped)
        for s, r in zip(samples, rows):
            pair = pair_of(r, det)
            s["chosen"], s["rejected"] = (_short(pair.chosen), _short(pair.rejected)) if pair else ("–", "–")
    # what the reward's reference component will compare with, decided as the run's plan and `inspect` decide it
    match = choose_match(ds, lambda r: reference_text(r, det)) if det.reference_field and len(ds) else None
    return {"detection": det.to_dict(), "split": split, "samples": samples,
            "reference_match": {"mode": match[0], "why": match[1]} if match else None,
            "thumbnails": _thumbnails(ds, det, dataset, local_only)}


def _thumbnails(ds, det, dataset: str, local_only: bool, n: int = 4) -> list[str]:
    """Small copies of the first rows' images (an image dataset), read as training reads them."""
    if not det.image_field:
        return []
    first = attach_images(ds.select(range(min(n, len(ds)))), det, images_folder(dataset), local_only)
    return [url for row in first.to_list() for url in thumbnails(decoded(row[IMAGES]), side=72)][:n]


def _short(text, n: int = 240) -> str:
    if text is None:
        return "–"
    text = str(text).strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def detection_markdown(result: dict) -> str:
    d = result["detection"]
    size = f"{d['num_rows']:,} rows" if d.get("num_rows") is not None else "rows: not counted"
    lines = [f"**Split `{result['split']}`**: {size}, columns: {', '.join(f'`{c}`' for c in d['columns'])}", ""]
    for role in ROLES:
        if d.get(role) or role in ("prompt_field", "reference_field"):
            why = d["reasons"].get(role, "")
            value = d.get(role)
            shown = " / ".join(value) if isinstance(value, list) else value or "—"
            lines.append(f"- **{role.replace('_fields', '').replace('_field', '')}**: `{shown}`"
                         + (f" — {why}" if why else ""))
    if d.get("context_fields"):
        lines.append(f"- **context**: {', '.join(f'`{c}`' for c in d['context_fields'])}")
    for k, why in d["reasons"].items():
        if k not in ROLES and k != "image_field":  # said on the images line
            lines.append(f"- *{k}*: {why}")
    if d.get("image_field"):  # an image dataset: its column, images per row and a few of them
        lo, hi = d.get("images_per_row") or (1, 1)
        pics = " ".join(f'<img src="{u}" alt="image" height="72" style="display:inline-block;margin-right:4px">'
                        for u in result.get("thumbnails") or [])
        lines.append(f"- **images**: `{d['image_field']}`, {lo if lo == hi else f'{lo}-{hi}'} per row — "
                     f"{d['reasons'].get('image_field', '')} (a vision-language model trains on them)<br>{pics}")
    match = result.get("reference_match")
    if match:  # auto's choice for this column (the Reward section's "Reference match" sets another)
        lines.append(f"- **reference match** (auto): `{match['mode']}` — {match['why']}")
    return "\n".join(lines)
