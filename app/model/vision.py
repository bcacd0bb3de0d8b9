"""Vision-language models: whether a model reads images, which of its modules are the vision side (tower and
projector, kept in 16-bit: bitsandbytes skips modules by their path, ``model.vision_tower``, not by a bare name),
where its language model is (LoRA's targets), its processor, and a prompt with images as the model's inputs.

Which families: every model transformers opens with ``AutoModelForImageTextToText`` (Gemma 3 / 4, Qwen2.5-VL,
Qwen3-VL, Qwen3.5, SmolVLM, LLaVA-style, Mistral 3). The module paths are read from the model built on the meta
device (no memory, no weights), never from a table of names, so a family with its own names is found the same way.

Owns: the vision decisions about a loaded or configured model. Must not load data or decide the run (the plan
does); the stdlib-only ``reads_images`` is what the planner may call without transformers.
"""

from __future__ import annotations

import re

# Modules of a vision-language model that are not the language model: the vision side, and the LM head, which
# bitsandbytes must not quantize either (its logits feed the loss in the compute dtype).
LM_HEAD = "lm_head"


def reads_images(config: dict | None) -> bool:
    """Whether a model's config.json describes a vision-language model (it has a vision tower's config)."""
    return bool(config) and isinstance(config.get("vision_config"), dict)


def language_model_path(model) -> str:
    """The dotted path of the language model inside a vision-language model (``model.language_model``)."""
    decoder = model.get_decoder()
    return next(name for name, m in model.named_modules() if m is decoder)


def vision_paths(model) -> list[str]:
    """The module paths that are not the language model: the language model's siblings that hold weights (the
    vision tower, the projector; an audio tower too), e.g. ``model.vision_tower``, ``model.multi_modal_projector``
    (Gemma 3), ``model.visual`` (Qwen-VL), ``model.vision_model``, ``model.connector`` (SmolVLM)."""
    lm = language_model_path(model)
    parent, _, _ = lm.rpartition(".")
    holder = model.get_submodule(parent) if parent else model
    prefix = f"{parent}." if parent else ""
    return [prefix + name for name, m in holder.named_children()
            if prefix + name != lm and any(True for _ in m.parameters())]


def skip_modules(model) -> list[str]:
    """What 4-bit loading leaves in 16-bit: the vision side and the LM head."""
    return kept_16bit(vision_paths(model))


def kept_16bit(paths) -> list[str]:
    """The modules 4-bit loading leaves in 16-bit, from the vision side's paths (as a plan decided them)."""
    return [*paths, LM_HEAD]


def tower_params(model) -> int:
    """Parameters of the vision side (the tower and the projector)."""
    return sum(p.numel() for path in vision_paths(model) for p in model.get_submodule(path).parameters())


def lora_target_pattern(model, target_modules) -> str:
    """PEFT's target_modules as a regex that matches only the language model's linear layers: ``all-linear`` on a
    vision-language model would also wrap the tower's (its q_proj / fc1 / out_proj), which stays 16-bit and frozen
    unless asked. ``target_modules``: "all-linear" or a list of layer names."""
    import torch

    lm = language_model_path(model)
    if target_modules == "all-linear" or not isinstance(target_modules, (list, tuple)):
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.get_submodule(lm).named_modules()
                        if isinstance(m, torch.nn.Linear)})
    else:
        names = list(target_modules)
    return rf"{re.escape(lm)}\..*\.({'|'.join(map(re.escape, names))})"


def load_processor(name_or_path: str, revision=None, trust_remote_code: bool = False, local_only: bool = False,
                   config=None):
    """The model's processor. ``config``: its transformers config when the caller has it (AutoProcessor then
    parses no config.json to find the processor's class)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(name_or_path, revision=revision, trust_remote_code=trust_remote_code,
                                         local_files_only=local_only, **({"config": config} if config else {}))


def with_images(messages: list[dict], images: list) -> list[dict]:
    """The conversation as the processor's template reads it: TRL's own placement of the images (before the text of
    the first user turn), so a prompt here is the prompt training saw."""
    from trl.data_utils import prepare_multimodal_messages

    return prepare_multimodal_messages([dict(m) for m in messages], images=list(images))


def image_prompt_text(processor, messages: list[dict], images: list) -> str:
    """The prompt's text with its image markers, as the chat template renders it with a generation prompt."""
    return processor.apply_chat_template(with_images(messages, images), tokenize=False, add_generation_prompt=True)


def encode_with_images(processor, texts: list[str], images: list[list]) -> dict:
    """Prompts with their images as the model's inputs, a left-padded batch (as app.model.generation.pad_left pads
    text: the padding asked of this call only, the tokenizer's own side untouched): input_ids, attention_mask and
    the image tensors the model reads (pixel_values, and whatever else the family's processor makes)."""
    return dict(processor(text=list(texts), images=[list(i) for i in images], padding=True, padding_side="left",
                          return_tensors="pt"))
