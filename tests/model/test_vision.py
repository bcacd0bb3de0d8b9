"""A vision-language model loaded as it trains: the language model in 4-bit, the vision side (found by module path on
the model's meta-device tree) in 16-bit, LoRA on the language model only, and generation with images that gives the
same greedy answer batched as alone."""

import re

import pytest
import torch

from app.config.schema import ModelConfig
from app.model.load import load_base_model
from app.model.shape import read_config
from app.model.shape import meta_model
from app.model.vision import language_model_path, lora_target_pattern, reads_images, skip_modules


def test_the_vision_side_is_found_by_module_path(tiny_vlm):
    shell = meta_model(str(tiny_vlm), local_only=True)
    assert next(shell.parameters()).device.type == "meta"
    assert language_model_path(shell) == "model.language_model"
    assert skip_modules(shell) == ["model.vision_tower", "model.multi_modal_projector", "lm_head"]
    assert reads_images(read_config(str(tiny_vlm))) and not reads_images({"model_type": "llama"})


def test_lora_targets_the_language_model_only(tiny_vlm):
    shell = meta_model(str(tiny_vlm), local_only=True)
    pattern = lora_target_pattern(shell, "all-linear")
    names = [n for n, m in shell.named_modules() if isinstance(m, torch.nn.Linear)]
    hit = [n for n in names if re.fullmatch(pattern, n)]
    assert hit and all(n.startswith("model.language_model.") for n in hit)
    assert any(n.startswith("model.vision_tower.") and n.endswith("q_proj") for n in names)  # left alone
    only_q = lora_target_pattern(shell, ["q_proj"])
    assert {n.rsplit(".", 1)[1] for n in names if re.fullmatch(only_q, n)} == {"q_proj"}


@pytest.mark.slow
def test_4bit_language_model_16bit_vision_side_and_batched_answers_equal_alone(tiny_vlm):
    from bitsandbytes.nn import Linear4bit

    from app.data.shapes import shapes_rows
    from app.model.generation import generate_with_images

    model, tok, info = load_base_model(ModelConfig(name_or_path=str(tiny_vlm)), local_only=True, for_training=False,
                                       device="cpu", images=True)
    kinds = {n: type(m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert all(k is Linear4bit for n, k in kinds.items() if n.startswith("model.language_model."))
    assert not any(issubclass(k, Linear4bit) for n, k in kinds.items()
                   if n.startswith(("model.vision_tower.", "model.multi_modal_projector", "lm_head")))
    assert next(model.model.vision_tower.parameters()).dtype == torch.float32
    assert info["4bit"] and info["kept_16bit"][:2] == ["model.vision_tower", "model.multi_modal_projector"]
    processor = info["processor"]
    rows = shapes_rows(6, seed=3)
    system = [{"role": "system", "content": "You are a helpful assistant."}]  # every other prompt longer: padded
    items = [{"messages": (system if i % 2 else []) + [{"role": "user", "content": r["question"]}],
              "images": [r["image"]]} for i, r in enumerate(rows)]
    batched = generate_with_images(model, processor, items, max_new_tokens=6, batch_size=6)
    alone = [generate_with_images(model, processor, [it], max_new_tokens=6)[0] for it in items]
    assert [o["text"] for o in batched] == [o["text"] for o in alone]
    assert all(o["tokens"] > 0 and not o["prompt_cut"] for o in batched)


# The families people fine-tune on one GPU in 2026, from transformers' own configs (default shapes, built on the meta
# device: no memory, no weights, no processor): their vision side is found by path, whatever each family calls it.
FAMILIES = {"Gemma4Config": ({"vision_config": {}}, ["model.vision_tower", "model.embed_vision"]),
            "Qwen2_5_VLConfig": ({}, ["model.visual"]), "Qwen3VLConfig": ({}, ["model.visual"]),
            "Qwen3_5Config": ({}, ["model.visual"]), "SmolVLMConfig": ({}, ["model.vision_model", "model.connector"]),
            "LlavaConfig": ({}, ["model.vision_tower", "model.multi_modal_projector"]),
            "Mistral3Config": ({}, ["model.vision_tower", "model.multi_modal_projector"])}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_s_vision_side_and_lora_targets_are_found_by_path(family):
    import transformers
    from transformers import AutoModelForImageTextToText

    from app.model.vision import vision_paths

    kwargs, expected = FAMILIES[family]
    config = getattr(transformers, family)(**kwargs)
    assert reads_images(config.to_dict())
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    lm = language_model_path(model)
    assert vision_paths(model) == expected
    linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    hit = [n for n in linear if re.fullmatch(lora_target_pattern(model, "all-linear"), n)]
    assert hit and all(n.startswith(f"{lm}.") for n in hit)
    assert any(n.startswith(tuple(expected)) for n in linear)  # the tower has linear layers LoRA leaves alone
