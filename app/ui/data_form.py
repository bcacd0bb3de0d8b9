"""The Train form's dataset part, as plain functions (no Gradio imports): an uploaded file kept where the run can
read it, the fields detected with their reasons and sample rows, and the column overrides a dataset starts with.

Owns: reading a dataset for the form. Must not start runs or build the command line (app/ui/handlers.py does).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from app.config.flags import split_datasets
from app.data import prompt_text, reference_text, resolve_dataset
from app.data.images import (BY_NAME, IMAGE_SUFFIXES, IMAGES, attach_images, dataset_shared_names, decoded,
                             images_folder, thumbnails)
from app.data.preference import pair_of
from app.data.splits import detect_dataset
from app.errors import UserError
from app.rewards.match import choose_for as choose_match
from app.ui.handlers import AUTO, FIELD_OVERRIDES, form_defaults, widget_value, widget_values

UPLOAD_DIR = "_uploads"  # inside the runs folder; not a run directory (no config.yaml), so `runs` ignores it
UPLOAD_TYPES = (".jsonl", ".json", ".csv", ".parquet")
ARCHIVES = (".zip",)  # pictures in their folders (a browser sends loose files without them)
ROLES = ("prompt_field", "reference_field", "messages_field", "chosen_field", "rejected_field", "pair_fields",
         "preference_field")


def save_upload(tmp_paths: str | list[str] | None, runs_dir: str | Path) -> str:
    """Copy a Gradio upload (temp files that are cleaned up later) into <runs>/_uploads/ so the training subprocess
    and later resumes can read it; returns the data file's path there. One data file, with its pictures when it
    has any: they go in one folder beside it. A browser sends loose files by name, without their folders, so loose
    pictures are kept by name (two different pictures of one name are refused: which row means which cannot be
    told) and a .zip keeps its folders (``cats/1.png``, ``dogs/1.png``); a row's picture is read beside the data
    file by its path, or by a name no other path of the data carries (app/data/images.py). Names carry a content
    hash: nothing is overwritten."""
    paths = [Path(p) for p in ([tmp_paths] if isinstance(tmp_paths, (str, Path)) else tmp_paths or []) if p]
    if not paths:
        raise UserError("no file uploaded")
    files = {}  # relative path in the upload -> bytes
    for p in paths:
        kind = p.suffix.lower()
        for rel, data in (_zip_members(p) if kind == ".zip" else [(p.name, None)]):
            if Path(rel).suffix.lower() not in (*UPLOAD_TYPES, *IMAGE_SUFFIXES):
                raise UserError(f"upload one dataset file ({', '.join(UPLOAD_TYPES)}), with its pictures if it has "
                                f"any (loose or in a .zip); got {rel}")
            data = p.read_bytes() if data is None else data
            if rel in files and files[rel] != data:
                raise UserError(f"two different pictures are named '{rel}': a browser sends file names without "
                                "their folders, so which row means which cannot be told; upload the pictures as one "
                                ".zip that keeps their folders (cats/1.png, dogs/1.png)")
            files[rel] = data
    data_files = [r for r in files if Path(r).suffix.lower() in UPLOAD_TYPES]
    if len(data_files) != 1:
        named = ", ".join(data_files) or "only pictures"
        raise UserError(f"upload one dataset file ({', '.join(UPLOAD_TYPES)}), with its pictures if it has any; "
                        f"got {named}")
    src = data_files[0]
    pictures = [r for r in files if r != src]
    digest = hashlib.sha256(b"".join(r.encode() + files[r] for r in sorted(files))).hexdigest()[:10]
    root = Path(runs_dir) / UPLOAD_DIR
    stem, suffix = Path(src).stem, Path(src).suffix.lower()
    folder = root / f"{stem}-{digest}" if pictures else root
    # the data file at the folder's top, its pictures where the zip had them relative to it
    top = Path(src).parent
    dest = folder / (Path(src).name if pictures else f"{stem}-{digest}{suffix}")
    for rel in [src, *pictures]:
        to = dest if rel == src else folder / _below(Path(rel), top)
        if not to.exists():
            to.parent.mkdir(parents=True, exist_ok=True)
            to.write_bytes(files[rel])
    if any("/" not in r for r in pictures):  # loose pictures, kept by name: rows' folders are read by name here
        (folder / BY_NAME).touch()
    return str(dest.resolve())


MAX_ZIP_BYTES = 2 << 30  # what an uploaded zip may unpack to (a zip bomb is refused, not unpacked)


def _zip_members(path: Path) -> list[tuple[str, bytes]]:
    """(relative path, bytes) of each file in an uploaded zip; a path that leaves the folder is refused."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            infos = [i for i in z.infolist() if not i.is_dir() and not _skipped(i.filename)]
            if sum(i.file_size for i in infos) > MAX_ZIP_BYTES:
                raise UserError(f"'{path.name}' unpacks to more than {MAX_ZIP_BYTES >> 30} GB; upload a smaller "
                                "one, or point the dataset box at the data file on disk")
            out = []
            for i in infos:
                rel = Path(i.filename)
                if rel.is_absolute() or ".." in rel.parts:
                    raise UserError(f"'{path.name}' holds '{i.filename}', a path outside its folder; zip the data "
                                    "file and its pictures' folders from the folder that holds them")
                out.append((rel.as_posix(), z.read(i)))
            return out
    except zipfile.BadZipFile:
        raise UserError(f"'{path.name}' is not a readable .zip; zip the data file and its pictures again") from None


def _skipped(name: str) -> bool:
    """Files a zip tool adds that are no part of the data (macOS's resource forks, folder thumbnails)."""
    parts = Path(name).parts
    return any(p == "__MACOSX" or p.startswith("._") for p in parts) or Path(name).name in (".DS_Store",
                                                                                           "Thumbs.db")


def _below(rel: Path, top: Path) -> Path:
    """A picture's place relative to the data file's folder (a zip holding ``set/data.jsonl`` and ``set/cats/1.png``
    keeps ``cats/1.png``); one outside that folder keeps its whole path."""
    try:
        return rel.relative_to(top)
    except ValueError:
        return rel


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
           chosen_field: str | None = None, rejected_field: str | None = None, label_field: str | None = None) -> dict:
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
                             chosen_field=widget_value(chosen_field), rejected_field=widget_value(rejected_field),
                             label_field=widget_value(label_field))
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
    # the file names several folders share are those of the whole split, as training reads it
    first = attach_images(ds.select(range(min(n, len(ds)))), det, images_folder(dataset), local_only,
                          shared=dataset_shared_names([ds], det.image_field))
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
