"""Load a base model in 4-bit (bitsandbytes NF4) and describe the LoRA adapter to attach.

The decisions (compute dtype, backend, where a model comes from) are small pure functions so they can be unit
tested on a machine without a GPU; the loading itself is the real transformers + bitsandbytes path, which runs on
CPU too (slowly), so tests exercise it for real on tiny models.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from app import machine
from app.config import LoraConfig, ModelConfig
from app.errors import UserError
from app.machine import DTYPES, installed, torch_dtype
from app.offline import quiet_library_noise
from app.rundir import find_adapter


def looks_local(name: str) -> bool:
    """A path the user meant as local: it exists, or it is spelled like a path (./x, /x, ~/x, x\\y)."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or os.sep in name.replace("/", "")


def pick_compute_dtype(setting: str, cuda: bool, bf16_supported: bool) -> str:
    """'auto' = bf16 where the GPU supports it (Ampere+), fp16 on older GPUs, fp32 on CPU (CPU kernels want fp32)."""
    if setting != "auto":
        if setting == "bf16" and cuda and not bf16_supported:
            raise UserError("model.compute_dtype=bf16 needs an Ampere or newer GPU; use fp16 or auto")
        return setting
    if not cuda:
        return "fp32"
    return "bf16" if bf16_supported else "fp16"


# Kernels that keep packed examples apart. flash_attention_2 reads the example boundaries from position_ids
# (varlen); with sdpa and eager, transformers >= 5 builds a block-diagonal causal mask from position_ids when the
# batch has no attention_mask and no KV cache, which is how TRL's padding-free collator feeds training (it sets
# use_cache=False). Measured: tests/test_models.py. Unsloth and a model's own remote code bring their own attention.
PACKING_KERNELS = ("flash_attention_2", "sdpa", "eager")


def pick_attention(setting: str, cuda: bool, flash_installed: bool) -> str:
    """'auto' = flash_attention_2 where it can run (CUDA + the flash-attn package), else PyTorch's sdpa."""
    if setting == "flash_attention_2":
        if not cuda:
            raise UserError("model.attn_implementation=flash_attention_2 needs a CUDA GPU; use auto or sdpa here")
        if not flash_installed:
            raise UserError("model.attn_implementation=flash_attention_2 but flash-attn is not installed; "
                            "pip install flash-attn, or use auto")
        return setting
    if setting == "auto":
        return "flash_attention_2" if cuda and flash_installed else "sdpa"
    return setting


def pick_packing(setting: bool | None, attention: str, remote_code: bool = False, kept_apart: bool = True) -> bool:
    """SFT packing (best-fit-decreasing, padding-free: position_ids mark where each example starts). auto = on
    wherever the attention kernel keeps packed examples apart (PACKING_KERNELS), off for the Unsloth backend and
    for models with their own code; an explicit true where examples would see each other is refused.
    ``kept_apart``: what packed_examples_stay_apart measured on the loaded model."""
    ok = attention in PACKING_KERNELS and not remote_code and kept_apart
    if setting is None:
        return ok
    if setting and not ok:
        why = ("the model's own code (trust_remote_code)" if remote_code else
               "this architecture (measured: its positions or mask ignore where packed examples start)"
               if not kept_apart else f"the {attention} attention path")
        raise UserError(f"training.packing=true: with {why} packed examples would attend to each other; leave "
                        "training.packing empty (auto) or set it to false")
    return bool(setting)


@contextlib.contextmanager
def eval_keeping_4bit(model):
    """A training model in eval mode for a moment (no dropout, generate() uses its cache), its 4-bit layers left in
    training mode: an eval forward without grad makes bitsandbytes repack their weights for its CPU kernel, which
    changes later training numerics and breaks training a layer with a bias (seen with OPT). Restored on exit."""
    from bitsandbytes.nn import Linear4bit

    training = model.training
    model.eval()
    for m in model.modules():
        if isinstance(m, Linear4bit):
            m.train()
    try:
        yield model
    finally:
        model.train(training)


def packed_examples_stay_apart(model) -> bool:
    """Measured, not assumed: two short random sequences packed into one row (positions restarting, no mask, no
    cache: how TRL's padding-free collator feeds training) against the second one alone, and against the two simply
    concatenated (the second reading the first). Llama, Qwen, Mistral, Gemma, Phi and GPT-2 keep them apart in
    transformers 5; OPT (positions from the attention mask) and Falcon do not, and packing would let each example
    read the one before it. Judged against the concatenated run's difference, not a fixed tolerance: in bf16 on a
    GPU kernels of different shapes differ by a few percent of the logits (a fixed 2 % turned packing off there),
    while an example that reads another differs by about as much as the concatenated one."""
    import torch

    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    first, second = torch.randint(0, vocab, (1, 7), generator=g), torch.randint(0, vocab, (1, 5), generator=g)
    device = next(model.parameters()).device
    ids = torch.cat([first, second], dim=1).to(device)
    positions = torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0).to(device)
    with eval_keeping_4bit(model), torch.no_grad():  # no dropout: the passes must differ only by packing
        packed = model(input_ids=ids, position_ids=positions, use_cache=False).logits[:, 7:].float()
        alone = model(input_ids=second.to(device), use_cache=False).logits.float()
        joined = model(input_ids=ids, use_cache=False).logits[:, 7:].float()
    read = (joined - alone).abs().max()  # what reading the first example does to the second's logits
    return bool((packed - alone).abs().max() <= 0.1 * read + 1e-3 * alone.abs().max())


# Where configs keep their context length: Llama/Qwen/Mistral/Gemma, GPT-2, BLOOM-style, ChatGLM/Qwen-1, GPT-J.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(config) -> int | None:
    """The model's context in tokens, from its config; None where the config does not say. Past it a learned
    position table (GPT-2, OPT) fails with an IndexError and a rotary model degrades silently."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in CONTEXT_KEYS:
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def flash_attn_installed() -> bool:
    return installed("flash_attn")


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


def unavailable_model_hint(name: str) -> str:
    """What to do about a hub model this machine cannot fetch."""
    return (f"run 'qlora-app prefetch --model {name}' on a connected machine, pass a local model folder, or use "
            "--model arith-base (the tiny model shipped for offline use)")


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


def check_model_source(name: str, local_only: bool, offline_because: str = "--local-only forbids downloads") -> None:
    """Fail fast and clearly before transformers produces a long hub traceback. ``offline_because``: why downloads
    are off, in the words of the caller (the flag, or the machine's HF_HUB_OFFLINE)."""
    if looks_local(name):
        p = Path(name).expanduser()
        if not p.is_dir():
            raise UserError(f"model path '{name}' not found; pass an existing local model folder or a hub id")
        if not (p / "config.json").is_file():
            raise UserError(f"'{name}' has no config.json; pass a folder saved with save_pretrained()")
        return
    check_model_name(name)
    if local_only and not model_on_disk(name):
        raise UserError(f"model '{name}' is not in the local HF cache and {offline_because}; "
                        f"{unavailable_model_hint(name)}")


def quantization_config(mc: ModelConfig, dtype: str, fsdp: bool = False):
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=mc.quant_type,
        bnb_4bit_use_double_quant=mc.double_quant,  # ~0.37 bit/param saved (QLoRA paper)
        bnb_4bit_compute_dtype=torch_dtype(dtype),
        **({"bnb_4bit_quant_storage": quant_storage(dtype)} if fsdp else {}),
    )


def quant_storage(compute_dtype: str) -> str:
    """bnb_4bit_quant_storage under FSDP (app/train/fsdp.py): the 4-bit weights packed in the compute dtype, so
    FSDP can flatten and shard them together with the LoRA weights."""
    return DTYPES[compute_dtype]


def load_tokenizer(mc: ModelConfig, local_only: bool = False):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        mc.name_or_path, revision=mc.revision, trust_remote_code=mc.trust_remote_code, local_files_only=local_only
    )
    if tok.pad_token is None:  # batched generation and training both need padding
        tok.pad_token = tok.eos_token
    return tok


@dataclass(frozen=True)
class Placement:
    """Where a model runs and in what precision: decided once per process (app.train.plan for a run, the
    comparison for inference) from the config and this machine."""

    cuda: bool
    bf16: bool  # the GPU supports it
    gpu: str | None
    vram_gb: float | None
    compute_dtype: str  # bf16 | fp16 | fp32
    attention: str  # the kernel asked for (the model may fall back, see load_base_model)
    planned: bool = False  # a card this machine does not have (train --dry-run --gpu-memory GB)


def placement(mc: ModelConfig, device: str = "auto", facts: dict | None = None) -> Placement:
    """Where a model runs: on this machine's device (``runtime.device``), or on the device ``facts`` describe (a
    planned card: app.machine.planned_card)."""
    facts = facts or machine.device_facts(device)
    return Placement(cuda=facts["cuda"], bf16=facts["bf16"], gpu=facts["gpu"], vram_gb=facts["vram_gb"],
                     compute_dtype=pick_compute_dtype(mc.compute_dtype, facts["cuda"], facts["bf16"]),
                     attention=pick_attention(mc.attn_implementation, facts["cuda"], flash_attn_installed()),
                     planned=bool(facts.get("planned")))


def load_base_model(mc: ModelConfig, local_only: bool = False, for_training: bool = True, device: str = "auto",
                    fsdp: bool = False, where: Placement | None = None, tok=None):
    """Returns (model, tokenizer, info). The model is 4-bit unless model.load_in_4bit is false; ``device`` is
    runtime.device (auto / cpu / cuda), used when ``where`` (the decided placement) is not given; ``tok``: the
    tokenizer when the caller has loaded it already."""
    import torch
    from transformers import AutoModelForCausalLM

    check_model_source(mc.name_or_path, local_only)
    where = where or placement(mc, device)
    dtype, attention = where.compute_dtype, where.attention
    kwargs = dict(
        attn_implementation=attention,
        revision=mc.revision,
        trust_remote_code=mc.trust_remote_code,
        local_files_only=local_only,
        dtype=torch_dtype(dtype),
    )
    if mc.load_in_4bit:
        kwargs["quantization_config"] = quantization_config(mc, dtype, fsdp)
    # Always explicit: with no device_map, transformers' 4-bit loader puts the model on the GPU whenever one is
    # visible, which would ignore runtime.device=cpu. Under torchrun each rank takes its own GPU (LOCAL_RANK);
    # under FSDP the Trainer places (and shards) the model itself.
    if not fsdp:
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))} if where.cuda else {"": "cpu"}
    quiet_library_noise()
    model = _from_pretrained(AutoModelForCausalLM, mc, kwargs)
    # What the model really runs (auto may have fallen back to eager), which decides packing.
    attention = getattr(model.config, "_attn_implementation", None) or attention
    tok = tok if tok is not None else load_tokenizer(mc, local_only)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    if not for_training:
        model.eval()
    torch.manual_seed(0)
    info = {"compute_dtype": dtype, "cuda": where.cuda, "gpu": where.gpu,
            "4bit": mc.load_in_4bit and _has_4bit_layers(model), "attention": attention}
    return model, tok, info


def _has_4bit_layers(model) -> bool:
    """Whether transformers really quantized anything: for some architectures it quantizes nothing and only says
    so in a misleading line (Falcon's FalconLinear in transformers 5.23: "loading your model using eetq")."""
    from bitsandbytes.nn import Linear4bit

    return any(isinstance(m, Linear4bit) for m in model.modules())


def _from_pretrained(auto_cls, mc: ModelConfig, kwargs: dict):
    """Loads with the attention kernel asked for. On auto, an architecture without sdpa (Gemma 2) or flash
    attention support falls back to what it has: transformers picks sdpa, else eager, when asked for none. An
    explicit kernel the architecture lacks is the user's to change."""
    try:
        return auto_cls.from_pretrained(mc.name_or_path, **kwargs)
    except OSError as e:
        raise model_load_error(mc.name_or_path, e) from None
    except ValueError as e:
        if "attention" not in str(e) or kwargs.get("attn_implementation") is None:
            raise
        if mc.attn_implementation != "auto":
            raise UserError(f"model '{mc.name_or_path}' does not support model.attn_implementation="
                            f"{mc.attn_implementation}; set it to auto or eager") from None
    return auto_cls.from_pretrained(mc.name_or_path, **{**kwargs, "attn_implementation": None})


def peft_lora_config(lc: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=lc.r,
        lora_alpha=lc.alpha,
        lora_dropout=lc.dropout,
        # "LoRA Without Regret": all linear layers, attention and MLP; rank cannot make up for skipping MLPs.
        target_modules=lc.target_modules,
        exclude_modules=lc.exclude_modules or None,
        task_type="CAUSAL_LM",
    )


def attach_or_describe_lora(model, lc: LoraConfig):
    """(model, peft_config) for a TRL trainer: a fresh adapter is described by a LoraConfig that TRL attaches;
    lora.init_from loads an existing adapter as trainable and TRL gets the PeftModel with no config."""
    from peft import PeftModel

    if isinstance(model, PeftModel):  # the Unsloth backend attaches its own adapter
        return model, None
    if not lc.init_from:
        return model, peft_lora_config(lc)

    # Same preparation TRL gives a fresh adapter (it handles quantized bases itself), so both paths match.
    return PeftModel.from_pretrained(model, str(find_adapter(lc.init_from)), is_trainable=True), None


def linear_layer_names(model) -> list[str]:
    """The distinct names of the layers LoRA can target (q_proj, c_attn, ...), the LM head left out."""
    import torch
    from transformers.pytorch_utils import Conv1D

    out = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))}
    return sorted(out - {"lm_head"})


def match_adapter_dtype(model, compute_dtype: str) -> int:
    """TRL casts LoRA weights of a quantized model to bf16 (the QLoRA paper's choice on Ampere GPUs). With fp32
    compute (CPU) that only throws precision away: Adam updates smaller than bf16's ~3 significant digits vanish
    and training drifts instead of learning. Put trainable weights back in the compute dtype; returns how many."""
    import torch

    if compute_dtype != "fp32":
        return 0
    n = 0
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.to(torch.float32)
            n += 1
    return n
