"""Where a model comes from: a local folder or a hub id, whether it is on disk (the HF cache included), and the
one-line errors for a name that is neither or a download --local-only forbids. Checked before any data or weights
load, so a missing model fails in a second."""

from __future__ import annotations

import os
from pathlib import Path

from app.config.builtin import BUILTIN_MODELS, builtin_model_path
from app.config.resolve import model_name
from app.data.preview import has_pictures
from app.errors import UserError
from app.host.offline import hub_offline, hub_reachable


def looks_local(name: str) -> bool:
    """A path the user meant as local: it exists, or it is spelled like a path (./x, /x, ~/x, x\\y)."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or os.sep in name.replace("/", "")


def hub_id_problem(name: str) -> str | None:
    """Why ``name`` cannot be a hub model id (None: it can): 'org/name' or 'name', letters, digits, '-', '_', '.'."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return "a hub id is 'org/name'" if name.count("/") > 1 else "it is not a valid hub id"
    return None


def model_on_disk(name: str) -> bool:
    """Whether the model's config is at hand without the network: a local folder, or the hub id in the HF cache."""
    if looks_local(name):
        return (Path(name).expanduser() / "config.json").is_file()
    if hub_id_problem(name):
        return False
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def unavailable_model_hint(name: str, pictures: bool = False) -> str:
    """What to do about a hub model this machine cannot fetch; ``pictures``: the run's data has pictures, so the
    shipped model to name is the one that reads them."""
    shipped = ("--model shapes-vlm-base (the tiny vision-language model shipped for offline use: this data has "
               "pictures)" if pictures else
               "--model arith-base (the tiny model shipped for offline use; shapes-vlm-base for data with pictures)")
    return (f"run 'qlora-app prefetch --model {name}' on a connected machine, pass a local model folder, or use "
            f"{shipped}")


def run_model_hint(cfg):
    """A run's hint for a model it cannot fetch, asked only when one is missing: the shipped model that reads the
    run's data (shapes-vlm-base for data with pictures, arith-base otherwise)."""
    name = model_name(cfg)  # the method's default model when none is set
    return lambda: unavailable_model_hint(name, pictures=has_pictures(cfg.data, cfg.runtime.local_only))


def model_load_error(name: str, e: Exception) -> UserError:
    """One line for a model that could not be read; a hub miss says what to do about it."""
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    hint = "" if looks_local(name) else f"; {unavailable_model_hint(name)}"
    return UserError(f"could not load model '{name}': {first}{hint}")


def check_model_name(name: str) -> None:
    """A model name that can be neither a folder here nor a hub id is one line (before anything loads, dry runs
    too): 'no/such/dir', or a path relative to another folder than this one."""
    if looks_local(name) or Path(name).expanduser().exists():
        return check_model_source(name, local_only=False)
    problem = hub_id_problem(name)
    if problem:
        raise UserError(f"model '{name}' is no folder here (in {Path.cwd()}) and {problem}; pass an existing model "
                        "folder (an absolute path, or one relative to this folder), a hub id such as "
                        "Qwen/Qwen2.5-1.5B-Instruct, or --model arith-base (the tiny model shipped for offline use)")


# What transformers loads weights from (sharded ones come with an index).
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.gguf")


def weights_problem(name: str) -> str | None:
    """The line for a local model folder with a config.json but no weight files, else None."""
    p = Path(name).expanduser()
    if not looks_local(name) or not (p / "config.json").is_file():
        return None
    if any(next(p.glob(pattern), None) for pattern in WEIGHT_FILES):
        return None
    return (f"'{name}' has a config.json but no weights (model.safetensors or pytorch_model.bin); copy the weight "
            "files in, or pass the hub id it came from")


def check_model_source(name: str, local_only: bool, offline_because: str = "--local-only forbids downloads",
                       loads: bool = True, hint=None) -> None:
    """Fail fast and clearly before transformers produces a long hub traceback. ``offline_because``: why downloads
    are off, in the words of the caller (the flag, or the machine's HF_HUB_OFFLINE). ``loads``: the caller loads the
    model here, so a folder needs its weights and a hub model not on disk must be downloadable from here (a dry run
    reads only config.json, for any machine, and passes False: weights_problem is its note). ``hint``: what to do
    about a hub model this machine cannot fetch, in the caller's words, or a function that says it (asked only then:
    a run's hint reads its data); default: unavailable_model_hint."""
    if looks_local(name):
        p = Path(name).expanduser()
        if not p.is_dir():
            raise UserError(f"model path '{name}' not found; pass an existing local model folder or a hub id")
        if (p / "adapter_config.json").is_file() and not (p / "config.json").is_file():
            raise UserError(f"'{name}' is a LoRA adapter, not a model; pass its base as --model and the adapter as "
                            f"--set lora.init_from={name} (or compare / chat / export it as a run)")
        if not (p / "config.json").is_file():
            raise UserError(f"'{name}' has no config.json; pass a folder saved with save_pretrained()")
        if loads and (problem := weights_problem(name)):
            raise UserError(problem)
        return
    check_model_name(name)
    if model_on_disk(name):
        return
    said = (hint() if callable(hint) else hint) if local_only or loads and (hub_offline() or not hub_reachable()) \
        else None
    if local_only:
        raise UserError(f"model '{name}' is not in the local HF cache and {offline_because}; "
                        f"{said or unavailable_model_hint(name)}")
    if loads and (hub_offline() or not hub_reachable()):  # one line now, not a minute of download retries
        why = ("this machine is offline (HF_HUB_OFFLINE=1)" if hub_offline() else
               "the Hugging Face Hub cannot be reached from here")
        raise UserError(f"model '{name}' is not in the local HF cache and {why}; "
                        f"{said or unavailable_model_hint(name)}")


def model_folder(base: str, local_only: bool) -> Path:
    """The folder of model ``base`` on this machine: a folder as given, a shipped model by its name, else the hub
    id's snapshot (downloaded unless ``local_only``); one line when it is none of these."""
    if Path(base).expanduser().is_dir():
        return Path(base).expanduser().resolve()
    if base in BUILTIN_MODELS and (builtin_model_path(base) / "config.json").is_file():
        return builtin_model_path(base)
    from huggingface_hub import snapshot_download  # heavy
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(base, local_files_only=local_only))
    except (LocalEntryNotFoundError, HFValidationError, OSError) as e:
        raise UserError(f"the base model '{base}' is not a folder here nor in the local HF cache ({type(e).__name__}"
                        f"); pass a model folder, or run 'qlora-app prefetch --model {base}' first") from None
