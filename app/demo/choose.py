"""Which demo a `qlora-app demo` request runs: GRPO (plain or with tools), DPO, or the image demo; a combination
that has no demo is one line."""

from __future__ import annotations

from app.demo.dpo import run_dpo_demo
from app.demo.images import run_images_demo
from app.demo.run import run_demo
from app.errors import UserError


def run_chosen_demo(output_dir, quick: bool, console, seed: int, method: str = "grpo", tools: bool = False,
                    images: bool = False):
    if method not in ("grpo", "dpo"):
        raise UserError(f"--method {method} has no demo; pass grpo or dpo")
    if tools and method != "grpo":
        raise UserError("--tools is a GRPO demo (the model learns from the reward of its rollouts); drop --method")
    if images and (tools or method != "grpo"):
        raise UserError("--images is an SFT demo of its own (a vision-language model learns from labelled images); "
                        "drop --tools / --method")
    if images:
        return run_images_demo(output_dir, quick=quick, console=console, seed=seed)
    if method == "dpo":
        return run_dpo_demo(output_dir, quick=quick, console=console, seed=seed)
    return run_demo(output_dir, quick=quick, console=console, seed=seed, tools=tools)
