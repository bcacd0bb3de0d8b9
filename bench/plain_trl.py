"""The baseline side of bench_trl: a hand-written TRL script, as a user would write it without qlora-app.

    python bench/plain_trl.py SPEC.json

SPEC holds the model folder, the rows (a JSONL of question/answer), the method and the hyperparameters; bench_trl
gives the same SPEC to `qlora-app train` (as --set overrides), so both sides train the same model, rows, chat
format, LoRA and hyperparameters. The GRPO side scores with the same reward functions (qlora-app's shaped reward:
"same reward on both sides" is the point of the comparison). Timed by bench/steptimer.py like the other side.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steptimer  # noqa: E402


def images_sft(spec: dict):
    """The image side (bench_images): a vision-language model as a TRL user loads it for QLoRA (the language model
    in NF4, the vision tower and projector skipped by module path, LoRA on the language model), its processor as
    TRL's processing_class, and the rows as TRL's image format (prompt / completion / images)."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForImageTextToText, AutoProcessor, BitsAndBytesConfig
    from trl import SFTConfig, SFTTrainer

    from app.data.shapes import shapes_dataset

    torch.manual_seed(spec["seed"])
    proc = AutoProcessor.from_pretrained(spec["model"])
    skip = ["model.vision_tower", "model.multi_modal_projector", "lm_head"]
    model = AutoModelForImageTextToText.from_pretrained(
        spec["model"], dtype=torch.float32, device_map={"": "cpu"},
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                               bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32,
                                               llm_int8_skip_modules=skip))
    train = shapes_dataset()["train"]
    ds = train.map(lambda r: {"prompt": [{"role": "user", "content": r["question"]}],
                              "completion": [{"role": "assistant", "content": r["answer"]}], "images": [r["image"]]},
                   remove_columns=train.column_names)
    lora = LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=r"model\.language_model\..*\.(down_proj|gate_proj|k_proj|o_proj|q_proj|up_proj|v_proj)")
    args = SFTConfig(output_dir=spec["out"], learning_rate=spec["lr"], max_steps=spec["steps"],
                     per_device_train_batch_size=spec["batch"], gradient_accumulation_steps=1, seed=spec["seed"],
                     data_seed=spec["seed"], gradient_checkpointing=False, lr_scheduler_type="linear", warmup_steps=0,
                     logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, optim="adamw_torch",
                     dataloader_num_workers=0, disable_tqdm=True, bf16=False, max_length=None)
    return SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=proc, peft_config=lora)


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    steptimer.install()
    if spec["method"] == "images":
        trainer = images_sft(spec)
        for p in trainer.model.parameters():  # the adapter in the fp32 compute dtype, as qlora-app keeps it
            if p.requires_grad:
                p.data = p.data.float()
        trainer.train()
        return
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    torch.manual_seed(spec["seed"])
    cuda = spec.get("device") == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tok = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(
        spec["model"], dtype=dtype, attn_implementation="sdpa", device_map={"": 0 if cuda else "cpu"},
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                               bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype))
    rows = [json.loads(line) for line in Path(spec["rows"]).read_text().splitlines()]
    lora = LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    common = dict(output_dir=spec["out"], learning_rate=spec["lr"], max_steps=spec["steps"],
                  per_device_train_batch_size=spec["batch"], gradient_accumulation_steps=spec["accum"],
                  seed=spec["seed"], data_seed=spec["seed"], gradient_checkpointing=spec["checkpointing"],
                  lr_scheduler_type="constant_with_warmup", warmup_steps=0, logging_steps=1, save_strategy="no",
                  report_to="none", use_cpu=not cuda, optim="paged_adamw_8bit" if cuda else "adamw_torch",
                  dataloader_num_workers=0, disable_tqdm=True,
                  # TRL's configs default to bf16=True, which on a CPU means bf16 autocast: qlora-app computes in
                  # fp32 there (model.compute_dtype auto), so the baseline must too.
                  bf16=cuda)
    if spec["method"] == "sft":
        from trl import SFTConfig, SFTTrainer

        ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r["question"]}],
                                 "completion": [{"role": "assistant", "content": r["answer"]}]} for r in rows])
        args = SFTConfig(max_length=spec["max_length"], packing=spec.get("packing", False), **common)
        trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=lora)
    else:
        from trl import GRPOConfig, GRPOTrainer

        from app.config.schema import RewardConfig
        from app.rewards import build_reward_funcs

        funcs, weights = build_reward_funcs(RewardConfig(), has_reference=True)
        ds = Dataset.from_list([{"prompt": [{"role": "system", "content": spec["system_prompt"]},
                                            {"role": "user", "content": r["question"]}],
                                 "reference": r["answer"]} for r in rows])
        tools = {}  # bench_tools: the same built-in tools, as a user hands them to TRL (no guard)
        if spec.get("tools"):
            from app.tools.builtin import BUILTIN_TOOLS

            tools = {"tools": [BUILTIN_TOOLS[n] for n in spec["tools"]]}
            common["max_tool_calling_iterations"] = spec.get("max_tool_calls", 1)
        args = GRPOConfig(num_generations=spec["num_generations"], max_completion_length=spec["completion"],
                          temperature=1.0, beta=0.0, loss_type="dapo", reward_weights=weights,
                          generation_batch_size=spec.get("generation_batch_size"), **common)
        trainer = GRPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, reward_funcs=funcs,
                              peft_config=lora, **tools)
    # TRL casts a quantized model's LoRA weights to bf16; qlora-app keeps them in the fp32 compute dtype on CPU.
    # Same adapter dtype on both sides, or the comparison would time bf16 matmuls against fp32 ones.
    for p in trainer.model.parameters():
        if p.requires_grad and not cuda:
            p.data = p.data.float()
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1])
