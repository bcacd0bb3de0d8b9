"""Training: TRL SFTTrainer / GRPOTrainer on a 4-bit base with a PEFT LoRA adapter (one door: session.Session)."""
