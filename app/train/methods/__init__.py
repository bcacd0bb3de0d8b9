"""One trainer per method, built on the plan as decided: TRL's trainers with a LoRA adapter on the 4-bit base.

    args.py         the plan as TRL's SFTConfig / GRPOConfig / DPOConfig / ORPOConfig / KTOConfig / DistillationConfig
                    arguments
    common.py       what every trainer shares once TRL has built it;  checkpoints.py: the adapter's atomic saves
    sft.py          SFT;  grpo.py: GRPO with the run's rewards and tools;  sampler.py: GRPO's merged sampler
    preference_trainers.py   DPO, ORPO and KTO;  distill.py: distillation from the plan's teacher in memory
    outside_teacher.py       distillation from a teacher outside the training process (a GGUF, an endpoint): its
                    top-k log-probabilities, on-policy or on its written answers
    registry.py     TRAINERS: each method's trainer by the method's name, one signature (running/build.py reads it)

Owns: turning a plan into a TRL trainer. Must not decide anything (app/train/planning did) nor run, record or
report a run (app/train/running); imports nothing from app/train/running."""
