"""Training: one Session (session.py) opens, plans, records and closes every run; TRL's SFT, GRPO, DPO and KTO
trainers (sft.py, grpo.py, preference_trainers.py: DPO, ORPO and KTO) on a 4-bit base with a PEFT LoRA adapter,
built as planned (plan.py, build.py).

    request.py      the request's checks and the resume point;  preflight.py, memory.py: the memory estimate and fit
    reward_checks.py  the reward's checks (schema, judge: asked once) and the reference match auto picks
    args.py         the config as TRL's arguments;  common.py: what every trainer shares;  batching.py, context.py
    fastpaths.py    the GPU fast paths;  sampler.py: GRPO's merged sampler;  fsdp.py: sharding under torchrun
    callbacks.py    metrics, status, Stop, counts;  heldout_eval.py: the held-out evaluation during training
    checkpoints.py  saving the adapter;  oom.py: the out-of-memory ladder;  peakmem.py: peak memory
    images.py       a run on images: the model that reads them, their tokens, the vision side's weights
    rows.py         the training rows in the method's format;  answer_loss.py: which tokens of an SFT
                    conversation carry the loss (the assistant's answers by default);  kto.py: KTO's label weights
                    (its trainer: preference_trainers.py)
    precision.py    4-bit or 16-bit LoRA: both estimates, and the one to use, for a family 4-bit hurts (Qwen3.5)
    experts.py      a mixture-of-experts run: its experts counted as they load, 4-bit or not, LoRA on them or not
    runlog.py       train.log;  launcher.py, torchrun.py: torchrun's workers

Owns: the plan and every decision in it (memory, batching, context, fast paths, the OOM ladder), the trainers and
their callbacks, the torchrun launcher. Must not write config.yaml/status.json itself (app/run/record.py does,
for the session) nor change process-wide settings (app/host). The UI may import plan and memory (its per-card
verdicts), never the session or the trainers."""
