"""A model's family as the installed libraries know it, read from config.json and the tokenizer before any weight
loads: the class transformers opens it with (a run needs a causal language model class, or an image-text-to-text one
for a run on images), its chat template (one TRL ships, the model's own, or none) and what TRL does with that
template (reads its tool calls; masks its assistant turns for loss on the answers only).

"New model X does not work" is most often one of these: a family the installed transformers has no class for, or a
template TRL cannot read. Each is said in one line by the plan, before anything loads.

Owns ``model_class`` / ``check_class`` (the one line for a family with no class a run can train), ``read_family`` /
``family_of`` and ``Family`` (what app/train/planning/plan says and status.json records). Must not load weights;
transformers / trl are imported inside functions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from app.errors import UserError
from app.model.templates import masks_assistant_turns, shipped_template_name, tool_template_problem

CAUSAL_LM, IMAGE_TEXT = "AutoModelForCausalLM", "AutoModelForImageTextToText"


def model_class(config: dict, name: str, images: bool = False, trust_remote_code: bool = False) -> str | None:
    """The class a run opens the model of ``config`` (its config.json) with; None for a model type this transformers
    does not know (its config cannot load: said by the loader's own line). Raises UserError when transformers knows
    the type but has no class a run can train (an image classifier, an encoder, speech, ...)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    auto = IMAGE_TEXT if images else CAUSAL_LM
    remote = (config.get("auto_map") or {}).get(auto)
    if trust_remote_code and remote:
        return str(remote).rsplit(".", 1)[-1]
    model_type = config.get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        return None
    table = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES if images else MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    found = table.get(model_type)
    if found:
        return found if isinstance(found, str) else found[0]
    archs = ", ".join(config.get("architectures") or []) or model_type
    head = (f"model '{name}' is a {model_type} model ({archs}): transformers {transformers.__version__} has no {auto} "
            "class")
    if images and model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        fix = "so it cannot read pictures; train it on text (--set model.images=false)"
    elif not images and model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        fix = ("it is a vision-language model: train it on data with images (model.images turns on by itself) or "
               "--set model.images=true")
    else:
        fix = ("so it cannot be fine-tuned to write text; pick a text-generation model (Llama, Qwen, Gemma, ...), or "
               "a vision-language one for images")
    raise UserError(f"{head} for it, {fix}")


@dataclass(frozen=True)
class Family:
    """What the plan knows of a model's family."""

    model_type: str
    model_class: str | None  # None: a model type this transformers does not know
    template: str | None  # the name of the template TRL ships that the model's equals; None: its own, or none
    has_template: bool
    tool_calls: bool  # TRL reads the tool calls its template writes
    turn_masks: bool  # TRL masks every assistant turn (loss on the answers only)

    def record(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        what = f"model family: {self.model_type} ({self.model_class or 'a class transformers does not know'})"
        if not self.has_template:
            return (f"{what}; no chat template: prompts and conversations are written as plain 'User: / Assistant:' "
                    "text; --chat-template NAME puts one TRL ships in its place (one the model was trained with)")
        which = f"TRL's {self.template}" if self.template else "its own"
        reads = [("TRL reads its tool calls" if self.tool_calls else "TRL cannot read its tool calls (a tool run "
                  "is refused)"),
                 "masks every assistant turn" if self.turn_masks else "SFT on conversations learns each one's last "
                 "answer"]
        return f"{what}; chat template: {which} ({', '.join(reads)})"


def read_family(config: dict | None, tok, name: str, images: bool = False, trust_remote_code: bool = False
                ) -> Family | None:
    """The Family of a model from its config.json and tokenizer (None where either is not on disk)."""
    if config is None or tok is None:
        return None
    cls = model_class(config, name, images, trust_remote_code)
    template = getattr(tok, "chat_template", None)
    return Family(model_type=str(config.get("model_type")), model_class=cls,
                  template=shipped_template_name(template) if template else None, has_template=bool(template),
                  tool_calls=bool(template) and tool_template_problem(tok, name) is None,
                  turn_masks=bool(template) and masks_assistant_turns(tok))


def check_class(mc, config: dict | None) -> None:
    """One line, before anything loads, for a model (``mc``: the run's ModelConfig, ``config``: its config.json as
    the plan read it) whose family transformers has no class for that a run can train; nothing where its config.json
    is not on disk."""
    if config is not None:
        model_class(config, mc.name_or_path, bool(mc.images), mc.trust_remote_code)


def family_of(mc, tok, config: dict | None) -> Family | None:
    """The Family of the run's model (``mc``: its ModelConfig) with its tokenizer ``tok`` and its config.json as the
    plan read it (either None: not on disk)."""
    return read_family(config, tok, mc.name_or_path, bool(mc.images),
                       mc.trust_remote_code)
