"""The Method: what the rest of the program asks about a training method, answered by the method itself.

A Method answers with flags for what it is (what a training row holds, whether the trained model samples its own
answers, whether a reward scores them, whether a teacher runs beside it) and with hooks for what it decides from a
config (its "auto" batch and rank, its warnings, its own checks, its line on the model card). Planning, running, the
proof, the card, the demo chooser and the UI read these: none of them compares a method's name
(tests/structure/test_methods.py).

No imports of the config's schema: a hook reads the config it is handed (an AppConfig) by its fields."""

from __future__ import annotations

from app.config.fields import get_key

# A model that fits an 8 GB GPU for GRPO in 4-bit (about 1.2 GB of weights, room for 4-8 generations of 512 tokens)
# and already follows instructions well enough for GSM8K to give a useful reward signal; SFT's too.
DEFAULT_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
EFFECTIVE_BATCH_WARN = 32
# What a training row of a method holds (app/train/planning/rows.py builds each kind once):
ROW_KINDS = {
    "conversation": "a prompt and its reference answer, trained on whole (SFT)",
    "prompt": "a prompt the trained model answers itself (its samples are what it learns from)",
    "pair": "a prompt with a chosen and a rejected answer, both in one pass",
    "labelled": "a prompt with one answer labelled good or bad, beside a mismatched answer (its KL estimate)",
}
ANSWER_TOKENS = 128  # new tokens an evaluation gives an answer when the method sets no completion length


def rank_for_size(num_rows: int | None) -> int:
    """LoRA Without Regret: capacity should match the data. Small SFT sets need little; post-training scale ~256."""
    if num_rows is None:
        return 64
    if num_rows < 2_000:
        return 16
    if num_rows < 20_000:
        return 32
    if num_rows < 100_000:
        return 64
    return 256


class Method:
    """One training method. Subclasses set the flags and override the hooks that differ (app/config/methods/*.py)."""

    name: str = ""
    learns_from: str = ""  # the UI's radio, the CLI's --help: what it learns from
    words: str = ""  # how prose names it (empty: the name in capitals)
    experimental: bool = False  # runs TRL's experimental trainer
    learning_rate: float = 1e-5  # "LoRA Without Regret": ~10x full fine-tuning's
    rank: int | None = 16  # LoRA rank on auto; None: by the data's size (rank_for_size)
    rows: str = "conversation"  # a key of ROW_KINDS
    section: str | None = None  # the config section only this method reads (a bare --set key means its key)
    shadowed: bool = False  # its section repeats another's key names: a bare key is the other's unless this runs
    samples: bool = False  # the trained model samples answers while it trains (memory: prompt + completion)
    rewarded: bool = False  # a reward scores those samples: rewards, a judge, tools, the fast samplers, diagnoses
    teacher: bool = False  # a teacher model runs beside the student
    pictures: bool = False  # trains on rows with pictures
    picture_demo: bool = False  # `demo --images` has a run of this method
    offloading: bool = True  # TRL offers activation offloading for it
    demo: str | None = None  # the `demo --method` it has (app/demo/choose.py): "rollouts", "pairs", "teacher"
    system_prompt: str | None = None  # the system prompt it fills on auto (None: the data's own)

    @property
    def said(self) -> str:
        return self.words or self.name.upper()

    @property
    def completion_key(self) -> str | None:
        """The dotted key of its sampled answers' length (GRPO's, distillation's), None when it samples none."""
        return f"{self.section}.max_completion_length" if self.samples else None

    @property
    def trains_whole_examples(self) -> bool:
        """Whether a row is trained on whole (SFT: the answer-only loss, packing)."""
        return self.rows == "conversation"

    @property
    def two_sequences(self) -> bool:
        """Whether each example is two sequences in one pass (pairs, KTO's answer and its KL answer)."""
        return self.rows in ("pair", "labelled")

    def answer_tokens(self, cfg) -> int:
        """New tokens an evaluation gives each answer: what its samples may take, else ANSWER_TOKENS."""
        return get_key(cfg, self.completion_key) if self.completion_key else ANSWER_TOKENS

    def default_rank(self, num_rows: int | None) -> int:
        """The LoRA rank on auto: the method's, or by the data's size (``rank`` None: SFT's)."""
        return self.rank if self.rank is not None else rank_for_size(num_rows)

    def default_alpha(self, rank: int) -> int:
        return 32 if self.rank else max(16, rank // 4)

    def fill_batch(self, cfg) -> None:
        """Fill the batch settings left on auto (in place, on resolve's copy)."""
        t = cfg.training
        if t.per_device_train_batch_size is None:
            t.per_device_train_batch_size = 4
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 2

    def examples_per_step(self, completions: int, cfg) -> int:
        """The examples of ``completions`` sequences trained (GRPO: a prompt per group of completions)."""
        return completions

    step_unit = "examples"  # what the batch advice counts

    def batch_warnings(self, cfg, effective: int) -> list[str]:
        if effective < EFFECTIVE_BATCH_WARN:
            return []
        return [f"effective batch {effective} {self.step_unit} >= {EFFECTIVE_BATCH_WARN}: LoRA tolerates large "
                "batches worse than full fine-tuning (LoRA Without Regret); lower per_device_train_batch_size or "
                "gradient_accumulation_steps"]

    def check(self, cfg) -> str | None:
        """What this method refuses in a config (the schema's check, one line), else None."""
        return None

    def card_line(self, cfg, named) -> str | None:
        """The model card's line of what the method did; ``named(value, kind)``: how the card names a model."""
        return None
