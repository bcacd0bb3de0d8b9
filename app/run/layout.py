"""The run folder's contract between the engine (writer) and the UI / `runs` / `compare` (readers): every file
name, status word and metric key a reader relies on is defined here and nowhere else.

    <output_dir>/<run_name>/
        config.yaml      resolved AppConfig (re-runnable on its own), the plan's reasons as comments on top
        metrics.jsonl    one JSON object per logging step: step, loss, learning_rate, reward, rewards/<c>/mean, ...
        train.log        everything the trainer printed
        status.json      {"status": running|finished|failed|interrupted, "step", "max_steps", "pid", ...}
        adapter/         final PEFT adapter (adapter_config.json + adapter_model.safetensors)
        checkpoints/     Trainer checkpoints (checkpoint-N/), used by --resume
        curves.png       loss / reward curves, written at the end
        compare.json     the run's proof; comparisons/ the ad-hoc ones
        evals/           general ability, base vs adapter (lm-evaluation-harness: `qlora-app eval`)

Standard library only: the UI, `runs` and the CLI's --help read it."""

from __future__ import annotations

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
LOG = "train.log"
STATUS = "status.json"
EXPORTS = "exports"  # status.json: each export of the run and what it measured of itself (app/export/measure.py)
ADAPTER = "adapter"
BEST_ADAPTER = "adapter-best"  # training.keep_best: the adapter of the best held-out evaluation
# training.early_stop: the best held-out point's adapter is the run's (RUN/adapter), the last step's is kept here
LAST_ADAPTER = "adapter-last"
ADAPTER_FOLDERS = (ADAPTER, BEST_ADAPTER, LAST_ADAPTER)  # a run's own adapters, named after the run
CHECKPOINTS = "checkpoints"
EXPORTS = "exports"  # `qlora-app export RUN` without --out writes RUN/exports/<format>/
CURVES = "curves.png"
COMPARE_JSON = "compare.json"  # inside a run: its proof (app/run/proof.py); the demo's folder: the demo's result
DEMO_DPO_JSON = "compare-dpo.json"  # the demo's folder: `demo --method dpo`'s result
DEMO_TOOLS_JSON = "compare-tools.json"  # the demo's folder: `demo --tools`'s result
DEMO_IMAGES_JSON = "compare-images.json"  # demo --images: the image demo's comparison
DEMO_IMAGES_GRPO_JSON = "compare-images-grpo.json"  # demo --images --method grpo
DEMO_DISTILL_JSON = "compare-distill.json"  # demo --method distill: base, student and teacher
VISION = "images"  # status.json: a run on images (its column, images per row, tokens each, the vision side kept)
EXPERTS = "experts"  # status.json: a mixture-of-experts run (its parameters by kind, experts 4-bit or not, router)
TEACHER = "teacher"  # status.json: a distillation run's teacher (what, its precision, its head cut, its base shared)
COMPARISONS = "comparisons"  # a run's ad-hoc comparisons and earlier proofs, each a file of its own
# status.json: a mix's datasets as the run drew them (name, share, rows drawn of rows there, repeats, held out)
MIX = "mix"
EVALS = "evals"  # `qlora-app eval`: lm-evaluation-harness on base and adapter, a file per evaluation

RUNNING, FINISHED, FAILED, INTERRUPTED = "running", "finished", "failed", "interrupted"
STATUSES = (RUNNING, FINISHED, FAILED, INTERRUPTED)
# Never written: what readers show for a status.json that says running while its process is gone (kill -9, a
# power cut, an OOM kill), so a dead run never looks alive.
CRASHED = "crashed"
# What readers show for a folder with no status.json yet (made, nothing written: the UI's pre-created folder).
CREATED = "created"

# TRL logs each reward function's batch mean under this key (the function's __name__ is the component's name).
COMPONENT_PREFIX, COMPONENT_SUFFIX = "rewards/", "/mean"


# A tool run (tools.use / tools.environment): TRL's own figures per step (calls per completion, the share of calls
# that failed), ours per tool (tools/<name>/calls, failures, timeouts, latency_ms per step), the run's totals per tool
# in status.json, and the held-out answers whose every tool call succeeded.
TOOL_CALL_FREQUENCY = "tools/call_frequency"
TOOL_FAILURE_FREQUENCY = "tools/failure_frequency"
TOOL_PREFIX = "tools/"
TOOL_COUNTS = "tool_counts"
EVAL_TOOL_SUCCESS = "eval/tool_success"
EVAL_TOOL_CALLS = "eval/tool_calls"


# A run with a judge (reward.judge): its calls per step (judge/calls, failures, timeouts, latency_ms; the counters of
# app/rewards/judge/reward.py) and the run's totals in status.json.
JUDGE_PREFIX = "judge/"
JUDGE_COUNTS = "judge_counts"

# Reward samples that raised and scored None: metrics.jsonl's running count (each line), status.json's total and the
# first failure of each component (why it failed: the summary says it).
REWARD_ERRORS = "reward_errors"
REWARD_ERROR_TEXTS = "reward_error_first"

# Why a run's reward may not rise (app/run/diagnosis.py): status.json's list of what the run saw, each said once.
DIAGNOSIS = "diagnosis"
ADAPTER_UPDATE = "adapter/update"  # how far the adapter's weights moved since the last logged step, relative


# Held-out evaluation during training (training.eval_every): metrics.jsonl keys, and status.json's best point.
EVAL_PREFIX = "eval/"
EVAL_ACCURACY = "eval/accuracy"
EVAL_REWARD = "eval/reward"
EVAL_DIVERGENCE = "eval/divergence"  # a distillation run: KL(student || teacher) on its held-out answers


def interval_keys(key: str) -> tuple[str, str]:
    """A held-out share's 95% interval in metrics.jsonl: 'eval/accuracy' -> ('eval/accuracy_low',
    'eval/accuracy_high') (app/eval/uncertainty.share_interval; the curves draw it at each point)."""
    return f"{key}_low", f"{key}_high"


# Preference figures: one definition per name, the same on training batches (TRL's names) and on held-out pairs
# (app/eval/preference.py measures them), in the words PREFERENCE_WORDS gives every place that shows them.
DPO_ACCURACY = "rewards/accuracies"  # preference accuracy, training batches
DPO_MARGIN = "rewards/margins"  # reward margin, training batches
EVAL_PREF_ACCURACY = "eval/pref_accuracy"  # preference accuracy, held-out pairs
EVAL_PREF_MARGIN = "eval/pref_margin"  # reward margin, held-out pairs
EVAL_PREF_LIKELIER = "eval/pref_likelier"  # chosen more likely (the adapter), held-out pairs
PREF_BASE_LIKELIER = "pref_base_likelier"  # chosen more likely (the base): one number (status.json), not a curve
PREF_ROWS = "pref_rows"  # held-out pairs each preference evaluation scored
PREFERENCE_WORDS = {
    "preference accuracy": "the share of pairs whose DPO implicit reward is higher for the chosen answer: training "
                           "raised the chosen answer's log-probability more (or lowered it less) than the rejected "
                           "one's, against the base (TRL's rewards/accuracies); the base itself is at 0%",
    "reward margin": "the mean of that implicit reward difference, beta x the change in (chosen - rejected) "
                     "log-probability (TRL's rewards/margins)",
    "chosen more likely": "the share of pairs where the model gives the chosen answer the higher summed "
                          "log-probability: base and adapter each (long chosen answers can be less likely on both)",
}
BEST_STEP = "best_step"
BEST_SCORE = "best_score"  # held-out accuracy, or the mean reward for data without references
# status.json, training.early_stop: {stopped_at (None: the run took all its steps), best_step, best_score, patience,
# min_delta, waited}; and which step's adapter RUN/adapter holds, with why (the proof, the card and export read it)
EARLY_STOP = "early_stop"
ADAPTER_STEP = "adapter_step"
ADAPTER_CHOICE = "adapter_choice"
EVAL_SECONDS = "eval_seconds"  # wall time the evaluations took, in total
EVAL_ROWS = "eval_rows"  # the held-out rows each evaluation scored


def component_of(key: str) -> str | None:
    """'rewards/format/mean' -> 'format'; None for any other metric."""
    if not (key.startswith(COMPONENT_PREFIX) and key.endswith(COMPONENT_SUFFIX)):
        return None
    return key[len(COMPONENT_PREFIX):-len(COMPONENT_SUFFIX)] or None


def component_keys(records: list[dict]) -> list[str]:
    """The reward-component metric keys with a value in metrics.jsonl rows, sorted (a component that failed on every
    sample, a judge that never answered, logs NaN: it has no curve)."""
    return sorted({k for r in records for k, v in r.items() if v is not None and component_of(k)})


# Peak memory fields, in status.json (the running peak) and in metrics.jsonl rows (app/train/running/peakmem.py writes
# them).
PEAK_ALLOCATED, PEAK_RESERVED, PEAK_DEVICE = "peak_mem_allocated_gib", "peak_mem_reserved_gib", "peak_mem_device"


TRAINER_STATE = "trainer_state.json"  # inside checkpoint-N/ (transformers' names)
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's: what makes a folder an adapter
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
OPTIMIZER = "optimizer.pt"


# Where a bare run name (what `runs list` prints) is looked up, relative to the working folder: train's and the
# demo's default output folders.
RUN_FOLDERS = ("runs", "demo-runs")


def demo_preference_json(method: str) -> str:
    """The demo folder's result of `demo --method dpo` (DEMO_DPO_JSON) or of another method on its pairs (kto)."""
    return f"compare-{method}.json"
