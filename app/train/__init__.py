"""Training, in three sub-packages, lowest first (a module imports its own sub-package and those below, never one
above: tests/structure/test_architecture.py):

    planning/   every decision a run makes before its model loads: the request's checks (request.py), the plan
                (plan.py: make_plan calls the rest), the memory estimate and fit (memory.py, preflight.py), batching,
                context, the GPU fast paths, images, experts, 4-bit or 16-bit, the reward's checks, each method's
                training rows (rows.py, answer_loss.py, kto.py), FSDP's check and the out-of-memory ladder (oom.py)
    methods/    one trainer per method on the planned run: TRL's arguments (args.py), what every trainer shares
                (common.py, checkpoints.py: atomic saves), SFT (sft.py), GRPO and its merged sampler (grpo.py,
                sampler.py), DPO, ORPO and KTO (preference_trainers.py)
    running/    running a run: one Session (session.py) opens, plans, records and closes every run; it loads the
                model and builds the method's trainer (build.py), hears it through callbacks (callbacks.py,
                heldout_eval.py, peakmem.py), logs (runlog.py) and scales out through torchrun (launcher.py,
                torchrun.py)

What a method is (its rows, whether it samples, its reward, its teacher, its defaults) is app/config/methods/'s: the
plan asks the method object, never compares its name. A new method lands as that module, its TRL arguments
(methods/args.py), its trainer (methods/<method>.py) and its line in methods/registry.py (docs/architecture.md,
"Adding a method").

Owns: the plan and every decision in it, the trainers and their callbacks, the torchrun launcher. Must not write
config.yaml/status.json itself (app/run/record.py does, for the session) nor change process-wide settings
(app/host). The UI may import planning (its per-card verdicts), never methods or running."""
