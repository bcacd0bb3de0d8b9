"""Made-up runs for tests that need a trained adapter without training one: a LoRA adapter with random (non-zero)
weights on a tiny base, and the run folder the engine would write around it."""

from pathlib import Path

SYSTEM = "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."


def make_adapter(base_dir: Path, out: Path) -> Path:
    """A LoRA adapter on every linear layer whose weights are random (not the usual zero B), saved with PEFT."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    peft.save_pretrained(out)
    return out


def write_run(run: Path, base_dir: Path, adapter_src: Path, dataset: Path | None = None) -> Path:
    """A run directory as the engine writes it: config.yaml + adapter/."""
    import shutil

    from app.config.schema import AppConfig

    cfg = AppConfig.model_validate({
        "method": "grpo", "model": {"name_or_path": str(base_dir)},
        "data": {"dataset": str(dataset) if dataset else None, "system_prompt": SYSTEM, "heldout_size": 10},
    })
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(cfg.to_yaml())
    shutil.copytree(adapter_src, run / "adapter")
    return run
