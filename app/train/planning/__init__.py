"""A run's plan: every decision made before the model loads, each recorded with its reason.

    plan.py         make_plan: the one place the decisions are made, in order (calls every module below)
    adjustments.py  what the plan changed and why: applied per step, said a line per step
    request.py      the request's checks and the resume point;  reward_checks.py: the reward's checks and auto match
    memory.py       the memory estimate and the per-card verdicts;  preflight.py: the fit check and the changes that fit
    weights.py      what a model's weights take as they load (the trained one, a judge, a teacher)
    teacher.py      a distillation run's teacher: found and checked before it loads, its memory
    batching.py, context.py   GRPO's generation batch;  the model's context window and what is cut to it
    fastpaths.py    the GPU fast paths and the GRPO sampler;  fsdp.py: sharding under torchrun
    images.py       a run on images;  experts.py: a mixture-of-experts run;  precision.py: 4-bit or 16-bit LoRA
    rows.py         the training rows in the method's format;  answer_loss.py: which tokens of an SFT
                    conversation carry the loss;  kto.py: KTO's label weights
    oom.py          the out-of-memory ladder: what gives next, kept as a plan change

Owns: the decisions and the plan value (RunPlan). Must not load weights (the meta-device shell of
app/model/files.py is the one model a plan builds), build a trainer, nor import app/train/methods or running."""
