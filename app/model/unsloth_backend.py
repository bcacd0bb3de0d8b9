"""Optional Unsloth backend (CUDA only). Kept thin: it only swaps how the 4-bit model and the adapter are made;
TRL trainers, rewards, run folders and callbacks are the same as the HF path. Which backend a run uses is decided
once (``pick_backend``) and Unsloth imported first when it is (``import_first``). The translations are pure
functions so they are tested on machines without a GPU."""

from __future__ import annotations

import logging
import sys

from app.config.schema import AppConfig, LoraConfig
from app.errors import UserError
from app.host.machine import installed, torch_dtype
from app.run.lookup import find_adapter

# Unsloth wants explicit projection names; "all-linear" means every attention and MLP projection.
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def unsloth_load_kwargs(cfg: AppConfig, dtype: str) -> dict:
    return dict(
        model_name=cfg.model.name_or_path,
        max_seq_length=max(cfg.training.max_length, cfg.grpo.max_completion_length + 512),
        load_in_4bit=cfg.model.load_in_4bit,
        dtype=torch_dtype(dtype),
        local_files_only=cfg.runtime.local_only,
    )


def unsloth_peft_kwargs(lc: LoraConfig, seed: int) -> dict:
    targets = ALL_LINEAR if lc.target_modules == "all-linear" else list(
        [lc.target_modules] if isinstance(lc.target_modules, str) else lc.target_modules)
    targets = [t for t in targets if t not in set(lc.exclude_modules)]
    return dict(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=targets,
                use_gradient_checkpointing="unsloth", random_state=seed)


def unsloth_installed() -> bool:
    return installed("unsloth")


def pick_backend(setting: str, cuda: bool, usable: bool, installed: bool | None = None) -> str:
    """Unsloth only runs on CUDA, and only when it is imported before transformers (``usable``: installed and
    transformers not loaded yet in this process); 'auto' uses it when it can and falls back to plain HF otherwise.
    ``installed`` (default: ``usable``) tells a missing package from one that came too late."""
    installed = usable if installed is None else installed
    if setting == "unsloth":
        if not cuda:
            raise UserError("runtime.backend=unsloth needs a CUDA GPU; use runtime.backend=hf (or auto) on this machine")
        if not installed:
            raise UserError("runtime.backend=unsloth but unsloth is not installed; pip install 'qlora-app[unsloth]'")
        if not usable:
            raise UserError("runtime.backend=unsloth must be imported before transformers, and this process loaded "
                            "transformers first; start the run with `qlora-app train` in a new process, or use "
                            "runtime.backend=auto")
        return "unsloth"
    if setting == "auto" and cuda and usable:
        return "unsloth"
    return "hf"


def import_first(backend: str) -> bool:
    """Import Unsloth before transformers / trl / peft when the run's decided ``backend`` (pick_backend, once) is
    Unsloth: it patches those libraries at import, and patches applied after they are loaded are partly lost (it
    warns so). Called by the session before anything imports them; returns whether Unsloth was imported."""
    if backend != "unsloth":
        return False
    late = [m for m in ("transformers", "trl", "peft") if m in sys.modules]
    import unsloth  # noqa: F401 - for its patches

    if late:
        logging.getLogger("qlora_app").warning("unsloth imported after %s: some of its patches may be missing",
                                               ", ".join(late))
    return True


def load_with_unsloth(cfg: AppConfig, dtype: str):
    """Returns (peft_model, tokenizer). Only reached on CUDA with unsloth installed (see pick_backend)."""
    from unsloth import FastLanguageModel  # noqa: import only here: unsloth refuses to import without a GPU

    model, tok = FastLanguageModel.from_pretrained(**unsloth_load_kwargs(cfg, dtype))
    if cfg.lora.init_from:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(find_adapter(cfg.lora.init_from)), is_trainable=True)
    else:
        model = FastLanguageModel.get_peft_model(model, **unsloth_peft_kwargs(cfg.lora, cfg.training.seed))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok
