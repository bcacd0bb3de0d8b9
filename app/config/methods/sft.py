"""SFT: learns from reference answers, each example trained on whole (or its answer only), packed where it can."""

from __future__ import annotations

from app.config.methods.base import Method


def packs(cfg) -> bool:
    """Whether SFT will pack, as far as the config tells (app.model.placement.pick_packing decides with the kernel)."""
    return cfg.training.packing is not False and not cfg.model.trust_remote_code and cfg.runtime.backend != "unsloth"


class SFT(Method):
    name = "sft"
    learns_from = "learn from reference answers"
    learning_rate = 2e-4
    rank = None
    rows = "conversation"
    pictures = picture_demo = True

    def fill_batch(self, cfg) -> None:
        t = cfg.training
        if t.per_device_train_batch_size is None:
            # A packed row holds several examples (about 4 GSM8K rows in 1024 tokens): one packed row per micro-batch
            # keeps both the examples per optimizer step and the activation memory near the padded default's.
            t.per_device_train_batch_size = 1 if packs(cfg) else 4
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 4


METHOD = SFT()
