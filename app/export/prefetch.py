"""Prefetch hub files on a connected machine, for later --local-only runs."""

from __future__ import annotations

from app.data import resolve_dataset
from app.errors import UserError


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
