"""qlora-app: QLoRA fine-tuning (SFT and GRPO) on one consumer GPU, with a CLI and a local UI."""

__version__ = "0.1.0"
