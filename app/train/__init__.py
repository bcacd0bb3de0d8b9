"""Training: one Session (session.py) opens, plans, records and closes every run; TRL's SFT, GRPO and DPO trainers
(sft.py, grpo.py, dpo.py) on a 4-bit base with a PEFT LoRA adapter, built as planned (plan.py, build.py).

Owns: the plan and every decision in it (memory, batching, context, fast paths, the OOM ladder), the trainers and
their callbacks, the torchrun launcher. Must not write config.yaml/status.json itself (app/run/record.py does,
for the session) nor change process-wide settings (app/host). The UI may import plan and memory (its per-card
verdicts), never the session or the trainers."""
