"""Which demo a `qlora-app demo` request runs: GRPO (plain or with tools), DPO or KTO, distillation, or the image
demo; a combination that has no demo is one line."""

from __future__ import annotations

from app.demo.distill import run_distill_demo
from app.demo.dpo import run_dpo_demo
from app.demo.images import run_images_demo
from app.demo.run import run_demo
from app.errors import UserError


def run_chosen_demo(output_dir, quick: bool, console, seed: int, method: str | None = None, tools: bool = False,
                    images: bool = False):
    """``method``: as typed (None: the demo's own: GRPO, or SFT for --images)."""
    if images:
        if tools or method not in (None, "sft", "grpo"):
            raise UserError("--images is an SFT demo (a vision-language model learns from labelled images), or GRPO "
                            "with --method grpo; drop --tools / pass --method sft or grpo")
        return run_images_demo(output_dir, quick=quick, console=console, seed=seed, method=method or "sft")
    method = method or "grpo"
    if method not in ("grpo", "dpo", "kto", "distill"):
        raise UserError(f"--method {method} has no demo; pass grpo, dpo, kto or distill (or --images for sft)")
    if tools and method != "grpo":
        raise UserError("--tools is a GRPO demo (the model learns from the reward of its rollouts); drop --method")
    if method == "distill":
        return run_distill_demo(output_dir, quick=quick, console=console, seed=seed)
    if method in ("dpo", "kto"):  # the same pairs; KTO learns from each as a good and a bad answer
        return run_dpo_demo(output_dir, quick=quick, console=console, seed=seed, method=method)
    return run_demo(output_dir, quick=quick, console=console, seed=seed, tools=tools)
