"""Which demo a `qlora-app demo` request runs: each method names the demo it has (app/config/methods/: its
``demo``, and ``picture_demo`` for `--images`): GRPO (plain or with tools), DPO or KTO on the same pairs,
distillation, or the image demo; a combination that has no demo is one line."""

from __future__ import annotations

from app.config.methods import METHODS, with_
from app.demo.distill import run_distill_demo
from app.demo.dpo import run_dpo_demo
from app.demo.images import run_images_demo
from app.demo.run import run_demo
from app.errors import UserError


def _grpo(output_dir, quick, console, seed, method, tools):
    return run_demo(output_dir, quick=quick, console=console, seed=seed, tools=tools)


def _preference(output_dir, quick, console, seed, method, tools):  # the same pairs; KTO: each a good and a bad answer
    return run_dpo_demo(output_dir, quick=quick, console=console, seed=seed, method=method)


def _distill(output_dir, quick, console, seed, method, tools, gguf_teacher=False):
    return run_distill_demo(output_dir, quick=quick, console=console, seed=seed, gguf_teacher=gguf_teacher)


DEMOS = {"rollouts": _grpo, "pairs": _preference, "teacher": _distill}  # a Method's ``demo`` -> its runner


def run_chosen_demo(output_dir, quick: bool, console, seed: int, method: str | None = None, tools: bool = False,
                    images: bool = False, gguf_teacher: bool = False):
    """``method``: as typed (None: the demo's own: GRPO, or SFT for --images); ``gguf_teacher``: distillation's
    teacher as a Q4_K_M GGUF in llama.cpp's child process."""
    if gguf_teacher and (images or tools or not getattr(METHODS.get(method or "grpo"), "teacher", False)):
        raise UserError("--gguf-teacher is the distillation demo's (its teacher in llama.cpp, outside training "
                        "memory); pass --method distill with it")
    if images:
        pictured = with_("picture_demo")
        chosen = METHODS.get(method or "sft")
        if tools or chosen is None or not chosen.picture_demo:
            raise UserError(f"--images is an SFT demo (a vision-language model learns from labelled images), or GRPO "
                            f"with --method grpo; drop --tools / pass --method {' or '.join(sorted(pictured))}")
        return run_images_demo(output_dir, quick=quick, console=console, seed=seed, method=chosen.name)
    chosen = METHODS.get(method or "grpo")
    if chosen is None or chosen.demo is None:
        have = [n for n, m in METHODS.items() if m.demo]
        raise UserError(f"--method {method} has no demo; pass {', '.join(have[:-1])} or {have[-1]} (or --images for "
                        "sft)")
    if tools and not chosen.rewarded:
        raise UserError("--tools is a GRPO demo (the model learns from the reward of its rollouts); drop --method")
    if gguf_teacher:
        return _distill(output_dir, quick, console, seed, chosen.name, tools, gguf_teacher=True)
    return DEMOS[chosen.demo](output_dir, quick, console, seed, chosen.name, tools)
