"""Which checkpoints are complete: a checkpoint-N folder counts only when its trainer state, adapter weights and
optimizer state are all there and readable (a torn write is skipped, with a note), so --resume always finds a
complete one."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from app.run.layout import ADAPTER_WEIGHTS, CHECKPOINTS, OPTIMIZER, TRAINER_STATE


def checkpoint_step(ckpt: Path) -> int:
    """checkpoint-N -> N."""
    return int(Path(ckpt).name.split("-")[-1])


def checkpoints(run_dir: Path) -> list[Path]:
    """checkpoints/checkpoint-N folders, newest (highest N) first."""
    ck = Path(run_dir) / CHECKPOINTS
    if not ck.is_dir():
        return []
    cands = [p for p in ck.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return sorted(cands, key=checkpoint_step, reverse=True)


def checkpoint_problem(ckpt: Path, verify_data: bool = True) -> str | None:
    """Why --resume cannot continue from this checkpoint (None: it is complete). No tensors are loaded;
    ``verify_data`` also checks the optimizer archive's CRCs, which reads the whole file: resume does, the run
    listings polled by the UI every few seconds check only the archive's structure (a cut file has none)."""
    try:
        state = json.loads((Path(ckpt) / TRAINER_STATE).read_text())
        if not isinstance(state, dict) or "global_step" not in state:
            return f"{TRAINER_STATE} has no global_step"
    except OSError:
        return f"no readable {TRAINER_STATE}"
    except ValueError:
        return f"{TRAINER_STATE} is cut short or corrupt"
    weights = next((Path(ckpt) / w for w in ADAPTER_WEIGHTS if (Path(ckpt) / w).is_file()), None)
    if weights is None:
        return "no adapter weights"
    if weights.suffix == ".safetensors" and not _safetensors_ok(weights):
        return f"{weights.name} is cut short or corrupt"
    if not (Path(ckpt) / OPTIMIZER).is_file():
        return f"no {OPTIMIZER}"
    if not _zip_ok(Path(ckpt) / OPTIMIZER, verify_data):
        return f"{OPTIMIZER} is cut short or corrupt"
    return None


def _safetensors_ok(path: Path) -> bool:
    """The header parses and the file is as long as the header says (a cut file is shorter)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        return path.stat().st_size >= 8 + n + end
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _zip_ok(path: Path, verify_data: bool = True) -> bool:
    """torch.save writes a zip archive; a torn one has no central directory or a bad CRC."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None if verify_data else True
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def last_checkpoint(run_dir: Path, note=None, verify_data: bool = True) -> Path | None:
    """The newest complete checkpoint; ``note(line)`` hears about each newer, torn one that is skipped."""
    for p in checkpoints(run_dir):
        problem = checkpoint_problem(p, verify_data)
        if problem is None:
            return p
        if note:
            note(f"skipping torn checkpoint {p.name}: {problem}")
    return None
