"""The run directory: the contract between the engine (writer) and the UI / `runs` / `compare` (readers).

Every file name a reader relies on is defined here and nowhere else.

    <output_dir>/<run_name>/
        config.yaml      resolved AppConfig (re-runnable on its own)
        metrics.jsonl    one JSON object per logging step: step, loss, learning_rate, reward, rewards/<c>/mean, ...
        train.log        everything the trainer printed
        status.json      {"status": running|finished|failed|interrupted, "step", "max_steps", "pid", ...}
        adapter/         final PEFT adapter (adapter_config.json + adapter_model.safetensors)
        checkpoints/     Trainer checkpoints (checkpoint-N/), used by --resume
        curves.png       loss / reward curves, written at the end
"""

from __future__ import annotations

import json
import os
import re
import time
import zipfile
from datetime import datetime
from pathlib import Path

from app.errors import UserError

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
LOG = "train.log"
STATUS = "status.json"
ADAPTER = "adapter"
BEST_ADAPTER = "adapter-best"  # training.keep_best: the adapter of the best held-out evaluation
CHECKPOINTS = "checkpoints"
CURVES = "curves.png"
COMPARE_JSON = "compare.json"  # inside a run: its proof (app/proof.py); the demo's folder: the demo's result
DEMO_DPO_JSON = "compare-dpo.json"  # the demo's folder: `demo --method dpo`'s result
COMPARISONS = "comparisons"  # a run's ad-hoc comparisons and earlier proofs, each a file of its own

RUNNING, FINISHED, FAILED, INTERRUPTED = "running", "finished", "failed", "interrupted"
STATUSES = (RUNNING, FINISHED, FAILED, INTERRUPTED)
# Never written: what readers show for a status.json that says running while its process is gone (kill -9, a
# power cut, an OOM kill), so a dead run never looks alive.
CRASHED = "crashed"
# What readers show for a folder with no status.json yet (made, nothing written: the UI's pre-created folder).
CREATED = "created"

# TRL logs each reward function's batch mean under this key (the function's __name__ is the component's name).
COMPONENT_PREFIX, COMPONENT_SUFFIX = "rewards/", "/mean"


# Held-out evaluation during training (training.eval_every): metrics.jsonl keys, and status.json's best point.
EVAL_PREFIX = "eval/"
EVAL_ACCURACY = "eval/accuracy"
EVAL_REWARD = "eval/reward"
# Preference data: held-out pairs the adapter finds chosen more likely than rejected, and DPO's implicit reward
# margin on them (app/eval/preference.py); the base's accuracy is one number (status.json), not a curve.
EVAL_PREF_ACCURACY = "eval/pref_accuracy"
EVAL_PREF_MARGIN = "eval/pref_margin"
PREF_BASE_ACCURACY = "pref_base_accuracy"
PREF_ROWS = "pref_rows"  # held-out pairs each preference evaluation scored
# What DPO logs during training (TRL's names): on the training batch, the share of pairs with chosen's implicit reward
# above rejected's, and the mean margin between them.
DPO_ACCURACY = "rewards/accuracies"
DPO_MARGIN = "rewards/margins"
BEST_STEP = "best_step"
BEST_SCORE = "best_score"  # held-out accuracy, or the mean reward for data without references
EVAL_SECONDS = "eval_seconds"  # wall time the evaluations took, in total
EVAL_ROWS = "eval_rows"  # the held-out rows each evaluation scored


def component_key(name: str) -> str:
    return f"{COMPONENT_PREFIX}{name}{COMPONENT_SUFFIX}"


def component_of(key: str) -> str | None:
    """'rewards/format/mean' -> 'format'; None for any other metric."""
    if not (key.startswith(COMPONENT_PREFIX) and key.endswith(COMPONENT_SUFFIX)):
        return None
    return key[len(COMPONENT_PREFIX):-len(COMPONENT_SUFFIX)] or None


def component_keys(records: list[dict]) -> list[str]:
    """The reward-component metric keys present in metrics.jsonl rows, sorted."""
    return sorted({k for r in records for k in r if component_of(k)})


# Peak memory fields, in status.json (the running peak) and in metrics.jsonl rows (app/train/peakmem.py writes them).
PEAK_ALLOCATED, PEAK_RESERVED, PEAK_DEVICE = "peak_mem_allocated_gib", "peak_mem_reserved_gib", "peak_mem_device"


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", Path(text).name).strip("-")  # last part of a path or hub id
    return s.lower()[:32] or "data"


def default_run_name(method: str, dataset: str | None) -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{method}-{_slug(dataset or 'data')}"


def new_run_dir(output_dir: str | Path, run_name: str) -> Path:
    """Create a fresh run directory. An existing one is never reused: a suffix is added instead, so a new run
    can never overwrite a finished one."""
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = root / (run_name if n == 1 else f"{run_name}-{n}")
        try:
            candidate.mkdir()  # atomic: two runs started in the same second (the UI and a CLI) never share one
            return candidate
        except FileExistsError:
            n += 1


def check_new_run_dir(path: str | Path) -> Path:
    """``--run-dir`` of a new run: a folder that does not exist yet, or an empty one. A file, a run, or a folder
    holding other files is refused in one line: a new run never writes into what is already there."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise UserError(f"--run-dir '{d}' is a file, not a folder; pass a new folder for the run")
    if d.is_dir() and any(d.iterdir()):
        if is_run_dir(d):
            raise UserError(f"'{d}' already holds a run; pick a new --run-dir (runs are never overwritten), or "
                            f"continue it with qlora-app train --resume {d}")
        raise UserError(f"--run-dir '{d}' is a folder with other files in it; pass a new or empty folder for the run")
    blocked = next((p for p in d.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise UserError(f"--run-dir '{d}' cannot be made: '{blocked}' is a file; pass a folder path")
    return d


def unused_run_dir(output_dir: str | Path, run_name: str) -> Path:
    """A path for a new run under ``output_dir`` that nothing uses yet (not created: the run's session creates
    it, e.g. in the UI's subprocess): ``run_name``, or it with a -2, -3 ... suffix."""
    root, n = Path(output_dir), 1
    while True:
        candidate = root / (run_name if n == 1 else f"{run_name}-{n}")
        if not candidate.exists():
            return candidate
        n += 1


def create_run_dir(output_dir: str | Path, run_name: str | None, method: str, dataset: str | None,
                   run_dir: str | Path | None = None) -> Path:
    """The run directory of a new run: ``run_dir`` when the caller names one (new or empty:
    ``check_new_run_dir``), else a fresh <output_dir>/<run_name or date-method-dataset>. Only the run's session
    (app/train/session.py) calls this."""
    if run_dir is not None:
        d = check_new_run_dir(run_dir)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the run directory '{d}' ({e.strerror or e}); pass a writable "
                            "--run-dir") from None
        return d
    try:
        return new_run_dir(output_dir, run_name or default_run_name(method, dataset))
    except OSError as e:
        raise UserError(f"cannot create a run directory in '{output_dir}' ({e.strerror or e}); pass a writable "
                        "--output-dir") from None


def write_atomic(path: Path, text: str) -> None:
    """Write a small file atomically: a temporary sibling, flushed, renamed over the old one. The temporary name
    carries the pid: two processes writing the same file (the launchers of a multi-node run on a shared folder)
    must not rename each other's half-written copy away."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temporary left behind
        tmp.unlink(missing_ok=True)
        raise


def write_status(run_dir: Path, status: str | None, **fields) -> dict:
    """Atomic update (write + rename) so a reader tailing the directory never sees half a file. On a full disk
    the temporary copy cannot be written; the file is then rewritten in place (its blocks are already allocated,
    and a dead run must not stay "running"). ``status`` None keeps the status word as it is."""
    data = read_status(run_dir) or {}
    status = status or data.get("status", RUNNING)
    assert status in STATUSES, status
    data.update(fields, status=status, updated=time.time())
    text = json.dumps(data, indent=2)
    path = Path(run_dir) / STATUS
    try:
        write_atomic(path, text)
    except OSError:
        with open(path, "r+" if path.exists() else "w") as f:
            f.write(text)
            f.truncate()
    return data


def read_status(run_dir: Path) -> dict | None:
    p = Path(run_dir) / STATUS
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def append_metrics(run_dir: Path, record: dict) -> None:
    with open(Path(run_dir) / METRICS, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_metrics(run_dir: Path) -> list[dict]:
    """Tolerates a half-written last line (the writer may be mid-append while the UI reads)."""
    out = []
    p = Path(run_dir) / METRICS
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


TRAINER_STATE = "trainer_state.json"  # inside checkpoint-N/ (transformers' names)
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's: what makes a folder an adapter
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
OPTIMIZER = "optimizer.pt"


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


def truncate_metrics(run_dir: Path, step: int) -> int:
    """Drop metrics rows logged after ``step`` (a resume continues from there, so they will be logged again);
    returns how many were dropped. Replaced atomically, so a crash here loses nothing."""
    p = Path(run_dir) / METRICS
    if not p.exists():
        return 0
    keep, dropped = [], 0
    for line in p.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            dropped += 1  # a half-written last line from the crash
            continue
        if isinstance(rec, dict) and (rec.get("step") or 0) > step:
            dropped += 1
        else:
            keep.append(line)
    if dropped:
        write_atomic(p, "".join(line + "\n" for line in keep))
    return dropped


# Where a bare run name (what `runs list` prints) is looked up, relative to the working folder: train's and the
# demo's default output folders.
RUN_FOLDERS = ("runs", "demo-runs")


def locate(path: str | Path) -> Path:
    """A run given by its bare name is found under RUN_FOLDERS first; anything else is the path as given."""
    p = Path(path)
    if len(p.parts) == 1 and p.name not in (".", ".."):
        for root in RUN_FOLDERS:
            if (Path(root) / p).is_dir():
                return Path(root) / p
    return p


def is_run_dir(path: Path) -> bool:
    return (Path(path) / CONFIG).is_file()


def require_run_dir(path: str | Path) -> Path:
    p = locate(path)
    if not p.is_dir():
        raise UserError(f"run directory '{p}' not found; see 'qlora-app runs list' for existing runs")
    if not is_run_dir(p):
        raise UserError(f"'{p}' is not a qlora-app run directory (no {CONFIG}); pass a folder under your runs dir")
    return p


def list_runs(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and is_run_dir(p)]
    return sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True)


def has_adapter(run_dir: Path) -> bool:
    """Whether the run has saved its final adapter (a run that failed before its end has none)."""
    return (Path(run_dir) / ADAPTER / ADAPTER_CONFIG).is_file()


def run_of_adapter(adapter_dir: str | Path) -> Path | None:
    """The run an adapter folder belongs to: RUN/adapter, RUN/adapter-best, RUN/checkpoints/checkpoint-N, or a run
    folder holding the adapter files itself; None for a bare adapter."""
    a = Path(adapter_dir)
    run = a.parent if a.name in (ADAPTER, BEST_ADAPTER) else a.parent.parent if a.parent.name == CHECKPOINTS else a
    return run if is_run_dir(run) else None


def find_adapter(path: str | Path) -> Path:
    """Accept a run (directory or bare name) or an adapter directory; return the adapter directory."""
    p = locate(path)
    if has_adapter(p):
        return p / ADAPTER
    if (p / ADAPTER_CONFIG).is_file():
        return p
    if not p.exists():
        raise UserError(f"adapter '{p}' not found; pass a run directory or a PEFT adapter directory")
    if is_run_dir(p):
        st = read_status(p) or {}
        status = st.get("status", CREATED)
        why = f": {st['error']}" if st.get("error") else ""
        if status in (RUNNING, CREATED):
            todo = "wait for it to finish"
        elif last_checkpoint(p, verify_data=False) is not None:
            todo = f"continue it with qlora-app train --resume {p} (or pass one of its checkpoints/)"
        else:  # nothing to resume: a resume hint would only fail
            todo = "it saved no checkpoint either, so start the run again"
        raise UserError(f"run '{p}' has no adapter yet ({status} at step {st.get('step') or 0}{why}); {todo}")
    raise UserError(
        f"'{p}' holds no PEFT adapter ({ADAPTER_CONFIG}); pass a finished run directory or its adapter/ folder"
    )
