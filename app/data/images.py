"""Images in a dataset: which column holds them (by name and by value), how many a row has, and every row's images
read, checked and put in one ``images`` column (a list per row, as TRL's trainers take it).

What counts as an image: a PIL image, a ``datasets`` Image cell ({"bytes", "path"}), encoded bytes, a path to an
image file (relative to the data file's folder), a data URL, or an http(s) URL (fetched only when downloads are
allowed). Layouts: an image column (one image or a list), LLaVA / ShareGPT (``<image>`` in the text beside an image
column: the marker is dropped, TRL places the images before the first user turn's text), and messages whose content
has image parts ({"type": "image", "image": ...} or OpenAI's {"type": "image_url", "image_url": {"url": ...}}).

A missing or unreadable image is one line naming the row and the image (DataError, exit 2 at the plan), never a
row silently trained without its picture. Only the standard library at module level; PIL and ``datasets`` inside.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from app.data.profile import name_words
from app.errors import DataError
from app.host.net import fetch, public_address
from app.host.offline import hub_offline

IMAGE_WORDS = {"image", "images", "img", "imgs", "picture", "pictures", "photo", "photos", "figure", "screenshot"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
IMAGES = "images"  # the column the conversions carry (TRL's name)
# a column named only of these words (image, image_path, img_url, ...) is meant to hold images
IMAGE_NAME_WORDS = IMAGE_WORDS | {"path", "paths", "file", "files", "url", "urls", "uri"}
MARKER = re.compile(r"<image>\s*")  # LLaVA's placeholder in the text
_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"RIFF", b"BM")
# A folder whose pictures were kept by their names alone (the UI's upload of loose files: a browser sends names
# without folders): only there is a row's 'pics/0.png' read as the '0.png' beside the data file.
BY_NAME = ".pictures-by-name"


def is_image(v) -> bool:
    """Whether one value is an image or names one."""
    if type(v).__module__.startswith("PIL."):
        return True
    if isinstance(v, dict):
        return v.get("bytes") is not None or (isinstance(v.get("path"), str) and is_image(v["path"]))
    if isinstance(v, (bytes, bytearray)):
        return bytes(v[:4]).startswith(_MAGIC)
    if isinstance(v, str):
        s = v.strip().lower()
        return s.startswith("data:image/") or s.split("?")[0].endswith(IMAGE_SUFFIXES)
    return False


def image_values(v) -> list | None:
    """A cell's images as a list (one image, or a list of them); None when the cell holds no image."""
    if is_image(v):
        return [v]
    if isinstance(v, (list, tuple)) and v and all(is_image(x) for x in v):
        return list(v)
    return None


def _part_image(part) -> object | None:
    """The image a message content part carries ({"type": "image", "image"|"url"|"path": ...}, OpenAI's image_url)."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "image_url":
        url = part.get("image_url")
        return url.get("url") if isinstance(url, dict) else url
    if kind == "image":
        return next((part[k] for k in ("image", "url", "path") if part.get(k) is not None), None)
    return None


def message_images(msgs) -> list:
    """The images carried inside a conversation's content parts, in order."""
    out = []
    for m in msgs or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            out += [img for img in map(_part_image, content) if img is not None]
    return out


def find_image_field(rows: list[dict], columns: list[str]) -> tuple[str | None, str]:
    """(the column holding images, why). A column most of whose sampled cells are images (or whose name says image
    and whose cells name images), else a conversation column with image parts."""
    best, best_share = None, 0.0
    for c in columns:
        cells = [r.get(c) for r in rows if r.get(c) is not None]
        if not cells:
            continue
        share = sum(image_values(v) is not None for v in cells) / len(cells)
        named = bool(set(name_words(c)) & IMAGE_WORDS)
        if (share >= 0.5 or (named and share > 0)) and share > best_share:
            best, best_share = c, share
    if best is not None:
        return best, f"{best_share:.0%} of the sampled cells name images (files, bytes, URLs or image cells)"
    for c in columns:  # a column meant for images that holds none: said, never trained as text without its pictures
        words = set(name_words(c))
        if words & IMAGE_WORDS and words <= IMAGE_NAME_WORDS and rows:
            shown = next((repr(r.get(c))[:40] for r in rows if r.get(c) not in (None, "", [])), "empty cells")
            raise DataError(f"column '{c}' is named for images but none of its sampled cells is one ({shown}); "
                            "point it at image files (paths relative to the data file), image bytes or URLs, or "
                            "drop the column")
    for c in columns:
        if any(message_images(r.get(c)) for r in rows if isinstance(r.get(c), list)):
            return c, "its messages carry image parts"
    return None, ""


def images_per_row(rows: list[dict], field: str) -> tuple[int, int]:
    """(the fewest, the most) images a sampled row has."""
    counts = [len(_row_sources(r, field)) for r in rows]
    return (min(counts), max(counts)) if counts else (0, 0)


def _row_sources(row: dict, field: str) -> list:
    return _cell_sources(row.get(field))


def _cell_sources(v) -> list:
    """The image sources one cell holds: an image or a list of them, or the image parts of a conversation."""
    return image_values(v) or (message_images(v) if isinstance(v, list) else [])


def _path_of(src) -> str | None:
    """The file path an image source names (a path, or an image cell's path without bytes); None for a URL, a data
    URL or bytes."""
    if isinstance(src, dict):
        src = src.get("path") if src.get("bytes") is None else None
    if not isinstance(src, (str, Path)):
        return None
    s = str(src).strip()
    return None if not s or s.startswith(("data:", "http://", "https://")) else s


def shared_names(columns) -> frozenset[str]:
    """The file names that two different relative paths of the data carry (``cats/1.png`` and ``dogs/1.png``): such a
    picture is read by its path only, never found by its name alone, so a row can never show another row's picture.
    ``columns``: the image column's cells of every split (Image-typed columns hold their bytes and are skipped by the
    caller)."""
    by_name: dict[str, set[str]] = {}
    for cells in columns:
        for v in cells:
            for src in _cell_sources(v):
                if (s := _path_of(src)) and not Path(s).is_absolute():
                    by_name.setdefault(Path(s).name, set()).add(Path(s).as_posix())
    return frozenset(n for n, paths in by_name.items() if len(paths) > 1)


def dataset_shared_names(splits, field: str) -> frozenset[str]:
    """``shared_names`` of ``field`` over every split given (datasets Dataset objects); a column typed as images
    (bytes held in the data) names no file and is not read."""
    from datasets import Image

    def cells(ds):
        if ds is None or field not in ds.column_names:
            return []
        feature = ds.features[field]
        inner = getattr(feature, "feature", None)
        if isinstance(feature, Image) or isinstance(inner, Image):
            return []
        return ds.select_columns([field])[field]

    return shared_names(cells(ds) for ds in splits)


def _read(src, base: Path | None, local_only: bool, shared: frozenset = frozenset(), allow=public_address) -> bytes:
    """The encoded bytes of one image source (raises ValueError with what is wrong). ``shared``: file names two
    paths of the data carry (shared_names), never found by the name alone; ``allow``: the addresses a URL may reach
    (app/host/net.fetch: public ones unless the caller opens more)."""
    if type(src).__module__.startswith("PIL."):
        buf = io.BytesIO()
        src.save(buf, format="PNG")
        return buf.getvalue()
    if isinstance(src, dict):
        if src.get("bytes") is not None:
            return bytes(src["bytes"])
        src = src.get("path")
    if isinstance(src, (bytes, bytearray)):
        return bytes(src)
    s = str(src).strip()
    if s.startswith("data:"):
        head, _, data = s.partition(",")
        return base64.b64decode(data) if ";base64" in head else data.encode()
    if s.startswith(("http://", "https://")):
        if local_only or hub_offline():
            raise ValueError("is a URL and downloads are off (--local-only or HF_HUB_OFFLINE); download the images "
                             "and point the column at the files")
        try:
            return fetch(s, allow=allow)
        except ValueError as e:
            raise ValueError(f"is a URL that {e}") from None
    p = Path(s).expanduser()
    if not p.is_absolute() and base is not None:
        # beside the data file by its path; else, in a folder of pictures kept by name (BY_NAME: the UI's upload of
        # loose files), by its name alone, and only a name no other path of the data carries
        by_name = ((base / BY_NAME).is_file() and p.name not in shared and not (base / p).is_file()
                   and (base / p.name).is_file())
        p = base / p.name if by_name else base / p
    if not p.is_file():
        if p.name in shared:
            raise ValueError(f"not found (looked for {p}); other pictures of this data are named '{p.name}' too, "
                             "in other folders, so it is never looked up by its name alone: keep the pictures in "
                             "their folders beside the data file (in the UI: upload them as one .zip)")
        raise ValueError(f"not found (looked for {p})")
    return p.read_bytes()


def checked_image(src, base: Path | None, local_only: bool, shared: frozenset = frozenset(),
                  allow=public_address) -> bytes:
    """One image's bytes, decoded once to prove it is an image."""
    from PIL import Image, UnidentifiedImageError

    data = _read(src, base, local_only, shared, allow)
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise ValueError(f"is not a readable image ({type(e).__name__}: {str(e).splitlines()[0][:80]})") from None
    return data


def _shown(src) -> str:
    """An image source as a message names it: a path or URL as written, anything held in memory as image bytes."""
    if isinstance(src, dict):
        src = src.get("path") or "image bytes"
    if not isinstance(src, (str, Path)):  # bytes, a PIL image, a file object: never its repr
        return "image bytes"
    s = str(src)
    return s[:40] + "..." if s.startswith("data:") else s


def _row_images(row: dict, idx: int, field: str, text_fields: tuple, base, local_only: bool, split: str,
                shared: frozenset = frozenset()) -> dict:
    where = f"row {idx + 1}" + (f" of split '{split}'" if split else "")
    sources = _row_sources(row, field)
    if not sources:
        raise DataError(f"{where} has no image in '{field}'; fix or remove the row (every row of an image dataset "
                        "needs its image)")
    out = []
    for src in sources:
        try:
            out.append({"bytes": checked_image(src, base, local_only, shared), "path": None})
        except ValueError as e:
            raise DataError(f"{where}: image '{_shown(src)}' in '{field}' {e}; fix or remove the row") from None
    made = {IMAGES: out}
    for c in text_fields:  # LLaVA's <image> markers: TRL places the images itself
        v = row.get(c)
        if isinstance(v, str) and "<image>" in v:
            made[c] = MARKER.sub("", v)
        elif isinstance(v, list) and any(isinstance(m, dict) and "<image>" in str(m.get("value", m.get("content")))
                                         for m in v):
            made[c] = [_unmarked(m) for m in v]
    return made


def sample_problems(rows: list[dict], field: str, base: Path | None, local_only: bool,
                    limit: int = 16) -> tuple[int, list[str]]:
    """(pictures read, problems) of the first ``limit`` sampled rows, each picture read and decoded as a run reads
    it: every problem is the line `train` would refuse the data with (a missing file, an unreadable one, a URL with
    downloads off, a row without a picture). What `inspect` checks, where a newcomer checks data."""
    checked, problems = 0, []
    shared = shared_names([[r.get(field) for r in rows]])
    for i, row in enumerate(rows[:limit]):
        try:
            checked += len(_row_images(row, i, field, (), base, local_only, "", shared)[IMAGES])
        except DataError as e:
            problems.append(str(e))
    return checked, problems


def _unmarked(m):
    if not isinstance(m, dict):
        return m
    return {k: MARKER.sub("", v) if isinstance(v, str) else v for k, v in m.items()}


def images_folder(spec: str) -> Path | None:
    """The folder a dataset's relative image paths are read from: the data file's own folder (a folder dataset:
    the folder); None for the built-in and hub data, whose images are in the data."""
    p = Path(spec).expanduser()
    return p if p.is_dir() else p.parent if p.is_file() else None


def attach_images(ds, det, base: Path | None, local_only: bool = False, split: str = "", shared=None):
    """``ds`` with every row's images read, checked and in the ``images`` column (a list of ``datasets`` Image
    cells per row); ``base``: the folder relative image paths are read from (the data file's); ``split``: named in
    errors when not the training split; ``shared``: the file names several paths of the whole data carry (None:
    those of ``ds``). Raises DataError naming the first row whose image is missing or unreadable. Text data comes
    back as it was."""
    from datasets import Image, List

    if not det.image_field:
        return ds
    text_fields = tuple(c for c in (det.prompt_field, det.messages_field) if c and c != IMAGES)
    if shared is None:
        shared = dataset_shared_names([ds], det.image_field)
    kwargs = {"field": det.image_field, "text_fields": text_fields, "base": base, "local_only": local_only,
              "split": split, "shared": shared}
    ds = ds.map(_row_images, with_indices=True, fn_kwargs=kwargs, desc="reading images",
                remove_columns=[IMAGES] if IMAGES in ds.column_names and det.image_field != IMAGES else None)
    return ds.cast_column(IMAGES, List(Image()))


def undecoded(ds):
    """``ds`` with its ``images`` column as the stored bytes ({"bytes", "path"} per image), never decoded: what the
    conversions and the plan's checks read (a row's text, how many pictures it has, their sizes). A map over rows
    with decoded pictures holds each at its full size (a 3000x3000 photo: 27 MB) until its writer batch is encoded
    back, which filled the host RAM with a few thousand phone photos. Data without pictures comes back as it was."""
    from datasets import Image, List

    if ds is None or IMAGES not in getattr(ds, "column_names", ()) or not _is_image_list(ds.features[IMAGES]):
        return ds
    return ds.cast_column(IMAGES, List(Image(decode=False)))


def decoding(ds):
    """``ds`` with its ``images`` column decoding again (TRL's collator takes pictures, decoded a batch at a time)."""
    from datasets import Image, List

    if ds is None or IMAGES not in getattr(ds, "column_names", ()) or not _is_image_list(ds.features[IMAGES]):
        return ds
    return ds.cast_column(IMAGES, List(Image()))


def _is_image_list(feature) -> bool:
    from datasets import Image

    inner = getattr(feature, "feature", None)
    return isinstance(inner, Image)


def stored_bytes(ds) -> tuple[int, int]:
    """(pictures, their bytes as stored) of a dataset's ``images`` column, read from its Arrow table a thousand rows
    at a time (no row built, nothing decoded); (0, 0) without pictures. A picture kept as a path counts as its
    file's size."""
    import pyarrow.compute as pc

    if ds is None or IMAGES not in getattr(ds, "column_names", ()):
        return 0, 0
    count = total = 0
    for table in ds.select_columns([IMAGES]).with_format("arrow").iter(batch_size=1000):
        cells = pc.list_flatten(table.column(IMAGES))
        sizes = pc.binary_length(pc.struct_field(cells, "bytes")).to_pylist()
        paths = pc.struct_field(cells, "path").to_pylist()
        count += len(sizes)
        total += sum(n if n is not None else (Path(p).stat().st_size if p and Path(p).is_file() else 0)
                     for n, p in zip(sizes, paths))
    return count, total


def stored_sizes(cells: list) -> list[tuple[int, int]]:
    """(height, width) of a row's undecoded image cells, read from each file's header (nothing decoded)."""
    from PIL import Image

    out = []
    for c in cells or []:
        data = c.get("bytes") if isinstance(c, dict) else None
        with (Image.open(io.BytesIO(data)) if data is not None else Image.open(c["path"])) as img:
            out.append((img.height, img.width))
    return out


def decoded(cells: list) -> list:
    """A row's ``images`` cells as PIL images (``Dataset.to_list`` leaves Image cells as {"bytes", "path"})."""
    from PIL import Image

    out = []
    for c in cells or []:
        if isinstance(c, dict):
            c = Image.open(io.BytesIO(c["bytes"])) if c.get("bytes") is not None else Image.open(c["path"])
            c.load()
        out.append(c)
    return out


def open_image(path):
    """One image file a user named (chat --image): a PIL image, or one line saying what is wrong with it."""
    try:
        data = checked_image(str(path), None, local_only=True)
    except (ValueError, OSError) as e:
        raise DataError(f"image '{path}' {e}; pass an existing image file (PNG, JPEG, WebP, ...)") from None
    return decoded([{"bytes": data}])[0]


def thumbnails(images: list, side: int = 96) -> list[str]:
    """Small PNG copies of a row's images as data URLs: what a comparison keeps to show beside its answers."""
    out = []
    for img in images:
        small = img.convert("RGB").copy()
        small.thumbnail((side, side))
        buf = io.BytesIO()
        small.save(buf, format="PNG")
        out.append("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    return out
