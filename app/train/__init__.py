"""Training: TRL SFTTrainer / GRPOTrainer on a 4-bit base with a PEFT LoRA adapter (see runner.run_training)."""
