"""A run's model pair: an adapter and the base it was trained on, one copy in memory.

The one way every command opens a trained adapter (compare and the proof, chat, serve, the harness, pairs, export,
vLLM's command line): which base an adapter belongs to (its run's config, else PEFT's ``adapter_config.json``), a
``--model`` that names another base refused in one line, the base loaded in 4-bit as it trained, wrapped once with
the adapter (inference only), and the base side run under PEFT's ``disable_adapter()``, so both sides share every
weight but the LoRA deltas (a "base" side that silently kept the adapter on is a known failure of other tools;
tests/eval/test_compare.py checks it token for token against a plainly loaded base). The prompt of a conversation
(the run's system prompt, the tokenizer's chat template) is here too, so chat and the API server ask alike.

Owns: finding an adapter's base and loading the pair. Must not generate (app/model/generation.py), score or read
data; torch / transformers / peft are imported inside the functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from app.config.build import load_yaml_file, validate
from app.config.schema import AppConfig, ModelConfig
from app.data.turns import plain_text, render_conversation
from app.errors import UserError
from app.model.generation import format_prompt
from app.model.load import load_base_model
from app.model.published import as_sixteen_bit, dequantizing_config
from app.model.shape import read_config
from app.model.source import check_model_source
from app.run import layout, lookup
from app.run.store import read_status

SIDES = ("adapter", "base")


@dataclass(frozen=True)
class Target:
    """What a command asked to open: the adapter's folder, its run's config (None for a bare adapter), the base to
    load (the run's model settings, the name maybe a local copy given by --model) and the base it was trained on."""

    adapter_dir: Path
    run_cfg: AppConfig | None
    base: ModelConfig
    trained_on: str | None

    @property
    def system_prompt(self) -> str | None:
        return self.run_cfg.data.system_prompt if self.run_cfg else None

    @property
    def device(self) -> str:
        return self.run_cfg.runtime.device if self.run_cfg else "auto"


def _adapter_base(adapter_dir: Path) -> str | None:
    return lookup.adapter_config(adapter_dir).get("base_model_name_or_path")


def _run_config(adapter_dir: Path) -> AppConfig | None:
    """The AppConfig of the run that produced this adapter (app.run.lookup.run_of_adapter), or None."""
    run = lookup.run_of_adapter(adapter_dir)
    return validate(load_yaml_file(run / layout.CONFIG)) if run else None


def same_model(a: str, b: str) -> bool:
    """Names a user would consider the same base: equal ids, the same folder, or a local copy of a hub id."""
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    # 'Qwen/Qwen2.5-1.5B-Instruct' vs './models/Qwen2.5-1.5B-Instruct': a local download of the same model.
    # A real mismatch that slips through here is still caught by PEFT's shape check when loading.
    return pa.name.lower() == pb.name.lower()


def find_target(adapter: str | Path, model: str | None = None) -> Target:
    """The adapter (a run folder, its adapter/ or a bare PEFT adapter) and the base to load with it. A --model that
    names a different base than the one the adapter was trained on is one line."""
    adapter_dir = lookup.find_adapter(adapter)
    adapter_base = _adapter_base(adapter_dir)
    run_cfg = _run_config(adapter_dir)
    trained_on = (run_cfg.model.name_or_path if run_cfg else None) or adapter_base
    if model is None and trained_on is None:
        raise UserError(f"'{adapter_dir}' does not say which base model it was trained on; pass --model NAME|DIR")
    if model is not None and trained_on is not None and not same_model(model, trained_on):
        raise UserError(f"adapter '{adapter_dir}' was trained on base '{trained_on}', not on '{model}'; "
                        f"drop --model or pass --model {trained_on}")
    base = run_cfg.model.model_copy() if run_cfg else ModelConfig()
    base.name_or_path = model or trained_on
    return Target(adapter_dir, run_cfg, base, trained_on)


def open_target(adapter: str | Path, model: str | None = None, local_only: bool = False) -> Target:
    """``find_target`` and a base that cannot be had from here (offline, missing) said in a second, before any
    data or weights load."""
    target = find_target(adapter, model)
    check_model_source(target.base.name_or_path, local_only)
    return target


class Pair:
    """A loaded pair: ``model`` (the PeftModel), ``tok``, ``processor`` (a model that reads images: its processor,
    else None), and ``side(name)`` to run one side."""

    def __init__(self, target: Target, model, tok, processor=None):
        self.target, self.model, self.tok, self.processor = target, model, tok, processor

    def side(self, side: str):
        """A context in which ``model`` is that side: the base is the adapter switched off (no second copy)."""
        if side not in SIDES:
            raise UserError(f"side {side!r} is not one of {', '.join(SIDES)}")
        return base_side(self.model) if side == "base" else contextlib.nullcontext()


def base_side(model):
    """A context in which a PeftModel (a loaded pair's, or the one training) answers as its base: the adapter
    switched off, no second copy (the held-out preference log-probabilities' base side too)."""
    return model.disable_adapter()


def load_pair(target: Target, local_only: bool = False, device: str | None = None, files=None) -> Pair:
    """The base loaded once in 4-bit as it trained and wrapped with the adapter (inference only). A base the adapter
    does not fit is one line naming the base it was trained on. ``files``: the base's app.model.files.ModelFiles as
    the run's plan read them (the session's proof: config.json, the processor and the shell not read again)."""
    from peft import PeftModel  # heavy

    mc = target.base
    base, tok, info = base_as_trained(target, local_only, device or target.device, files)
    try:
        model = PeftModel.from_pretrained(base, str(target.adapter_dir), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as e:
        # A different base shows up as a state-dict size mismatch or as target modules missing from the model;
        # PEFT's message is many lines, keep the first telling one.
        lines = [ln.strip().rstrip(":") for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
        detail = next((ln for ln in lines if "size mismatch" in ln or "not found" in ln), lines[0])[:200]
        trained_on = target.trained_on
        other = f" (it was trained on '{trained_on}')" if trained_on and trained_on != mc.name_or_path else ""
        raise UserError(f"adapter '{target.adapter_dir}' does not fit base '{mc.name_or_path}'{other}: {detail}; "
                        "pass the base it was trained on with --model") from None
    model.eval()
    return Pair(target, model, tok, info.get("processor"))


MERGE_ONTO = {"trained": "the weights the adapter was trained on: a 4-bit run's NF4 base, dequantized (what the "
                          "proof, chat and serve ran)",
              "original": "the base's own 16-bit weights (the adapter was trained against their NF4 rounding)"}


def base_as_trained(target: Target, local_only: bool, device: str, files=None):
    """(model, tokenizer, info) of the adapter's base loaded as its run trained on it (4-bit as it was, for
    inference): a run on pictures recorded the modules its plan kept 16-bit, read here, never worked out again."""
    mc = target.base
    run = lookup.run_of_adapter(target.adapter_dir) if mc.images else None
    kept = ((read_status(run) or {}).get(layout.VISION) or {}).get("kept_16bit") if run is not None else None
    return load_base_model(mc, local_only=local_only, for_training=False, device=device, images=bool(mc.images),
                           vision_paths=tuple(kept) if kept else None,
                           files=files if files is not None and files.name == mc.name_or_path else None)


def merged_model(adapter_dir: Path, base: str, dtype, local_only: bool = False, images: bool = False,
                 onto: str = "trained"):
    """The adapter merged into a ``dtype`` (a torch dtype) copy of its base ``base`` (16-bit, not 4-bit: what export
    writes), in place, so there is no second copy of the weights. ``images``: the vision-language model whole.
    ``onto`` (MERGE_ONTO): "trained" puts the base's quantized layers back as the run's 4-bit load made them
    (dequantized NF4) before merging, so the merged model computes what the adapter did (an adapter folder without
    its run says nothing of how it trained: merged as "original"); "original" keeps the base's own weights."""
    from peft import PeftModel  # heavy
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText  # heavy

    auto = AutoModelForImageTextToText if images else AutoModelForCausalLM
    published = dequantizing_config(read_config(base))  # MXFP4 / FP8 uploads: their 16-bit values
    model = auto.from_pretrained(base, dtype=dtype, local_files_only=local_only,
                                 **({"quantization_config": published} if published is not None else {}))
    if published is not None:
        as_sixteen_bit(model, dtype)
    target = find_target(adapter_dir)
    if onto == "trained" and target.run_cfg is not None:  # a bare adapter folder does not say how it was trained
        as_trained(model, target, local_only)
    return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()


def as_trained(model, target: Target, local_only: bool) -> int:
    """``model``'s (16-bit) weights of every layer the run's 4-bit load quantizes set to that load's values,
    dequantized: the base as the adapter was trained on it (the same quant type, double quantization and blocks, by
    loading it as the run did): the linear layers bitsandbytes converts and the fused experts quantized as they
    loaded (read through their parametrization, which dequantizes). Returns how many tensors were set (0: the run
    trained on an unquantized base)."""
    import torch  # heavy

    if not target.base.load_in_4bit:
        return 0
    from bitsandbytes.functional import dequantize_4bit  # heavy
    from bitsandbytes.nn import Linear4bit
    from torch.nn.utils import parametrize

    quantized, _, _ = base_as_trained(target, local_only, "cpu")
    own = dict(model.named_modules())
    done = 0
    with torch.no_grad():
        for name, layer in quantized.named_modules():
            if name not in own:
                continue
            if isinstance(layer, Linear4bit):
                weight = dequantize_4bit(layer.weight.data, layer.weight.quant_state)
                own[name].weight.copy_(weight.to(own[name].weight.dtype).reshape(own[name].weight.shape))
                done += 1
            for pname in layer.parametrizations if parametrize.is_parametrized(layer) else ():  # NF4 experts
                target_param = getattr(own[name], pname)
                target_param.copy_(getattr(layer, pname).to(target_param.dtype))
                done += 1
    del quantized
    return done


def open_pair(adapter: str | Path, model: str | None = None, local_only: bool = False) -> Pair:
    """``open_target`` then ``load_pair``: a command that needs nothing between the two (chat, serve)."""
    return load_pair(open_target(adapter, model, local_only), local_only)


def system_first(messages: list[dict], system: str | None) -> list[dict]:
    """The conversation a model is asked: the run's ``system`` prompt first when the conversation has no system turn
    of its own (a user's own system turn stands, as a chat or API client meant it). The one rule of every way a run
    is asked (app/ask/asking.py); training rows merge the two instead (app/data/turns.with_system), which held-out
    rows keep."""
    msgs = list(messages)
    if system and not any(m["role"] == "system" for m in msgs):
        msgs = [{"role": "system", "content": system}, *msgs]
    return msgs


def conversation_prompt(tok, messages: list[dict], system: str | None = None, tools: list | None = None) -> str:
    """A conversation's prompt text: ``system`` first when the conversation has no system turn of its own (the run's
    system prompt: how the adapter was taught to be asked), then the tokenizer's chat template, or without one the
    plain prompt training wrote (app.data.turns.plain_text: system prompt, blank line, the conversation). Chat's and
    the API server's. ``tools``: their schemas (or functions), rendered by the chat template as training rendered
    them."""
    msgs = system_first(messages, system)
    if tools:
        return tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    return format_prompt(tok, {"messages": msgs, "plain": plain_conversation(messages, system)})


def plain_conversation(messages: list[dict], system: str | None = None) -> str:
    """A conversation's prompt for a tokenizer without a chat template, as training wrote it
    (app.data.turns.plain_text): ``system`` first unless the conversation has a system turn of its own (then one of
    its turns)."""
    own = any(m["role"] == "system" for m in messages)
    return plain_text(render_conversation(messages), None if own else system)
