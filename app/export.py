"""Export an adapter (copy or merge into the 16-bit base) and prefetch hub files for later offline use."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app import rundir
from app.data import resolve_dataset
from app.errors import UserError
from app.eval.compare import resolve_target
from app.models import torch_dtype

MERGE_DTYPES = ("bf16", "fp16", "fp32")


def export_adapter(run: Path, out: Path, merge: bool = False, local_only: bool = False, dtype: str = "bf16") -> Path:
    """Copy the adapter, or merge it into a ``dtype`` copy of the base (bf16 by default: the 16-bit model people
    run; fp32 keeps every bit of a CPU-trained adapter). Files get the umask's mode, like any file the user makes."""
    if dtype not in MERGE_DTYPES:
        raise UserError(f"--dtype {dtype} is not one of {', '.join(MERGE_DTYPES)}; pick one (bf16 is the default)")
    adapter = rundir.find_adapter(run)
    out = Path(out)
    if out.exists():
        raise UserError(f"'{out}' already exists; pick a new --out folder (nothing is overwritten)")
    if not merge:
        shutil.copytree(adapter, out)
        _umask_modes(out)
        return out
    from peft import PeftModel  # heavy: only for a merge
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # The same rule compare uses: the run's config names the base as the user gave it, else adapter_config.json.
    base_name = resolve_target(adapter)[2].name_or_path
    # Merging needs the unquantized weights: merging into 4-bit would bake rounding error into every layer.
    base = AutoModelForCausalLM.from_pretrained(base_name, dtype=torch_dtype(dtype), local_files_only=local_only)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(adapter if (adapter / "tokenizer_config.json").is_file() else base_name,
                                  local_files_only=local_only).save_pretrained(out)
    _umask_modes(out)
    return out


def _umask_modes(folder: Path) -> None:
    """Libraries write through a private temporary file renamed into place (mode 0600); exported files are for
    other tools and people, so they get the mode the user's umask gives a new file (0644 for the usual 022)."""
    umask = os.umask(0)
    os.umask(umask)
    for p in Path(folder).rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)


def prefetch(model: str | None, dataset: str | None, dataset_config: str | None):
    """Yields progress lines. Needs the network; what it fetches lands in the normal HF cache."""
    if model:
        from huggingface_hub import constants, snapshot_download

        if constants.HF_HUB_OFFLINE:  # what the hub library itself goes by
            raise UserError("HF_HUB_OFFLINE is set, so nothing can be downloaded; prefetch on a connected machine "
                            "with it unset")
        try:
            path = snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"])
        except Exception as e:  # noqa: BLE001 - no network, unknown or gated repo: one line, not the hub's traceback
            detail = (str(e).strip().splitlines() or [""])[0][:200]
            raise UserError(f"could not download model '{model}' ({type(e).__name__}: {detail}); check the id and "
                            "the network (prefetch runs on a connected machine)") from None
        yield f"model {model} -> {path}"
    if dataset:
        dd = resolve_dataset(dataset, dataset_config, local_only=False)
        yield f"dataset {dataset}: " + ", ".join(f"{k}={len(v)}" for k, v in dd.items())
