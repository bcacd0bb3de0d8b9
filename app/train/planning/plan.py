"""The run plan: every decision of a training run, made once, before the trainer is built, and then only read.

Owns the decisions: ``decide_machine`` (device, compute dtype, attention kernel, backend) and ``make_plan``, which
takes the config as the user gave it, the training rows and that machine, and decides, in order:
  1. the resolved config with absolute paths (app.config.resolve.resolve: the one resolution of a run);
  2. memory, before any model download: the estimate from the data's token lengths, the fit check, and what
     fitting gave up (a smaller GRPO generation batch, SFT activation offloading, vLLM) (app.train.planning.preflight);
  3. the model's context (its config and tokenizer: small files): a GRPO completion length that fills it is
     halved, prompts that leave no room are dropped, SFT's max_length is cut to it (app.train.planning.context), which
     tokens of a conversation train (app.train.planning.answer_loss);
  4. the fast paths on the fitted config, and the GRPO generation batch shrunk to the prompts there are.
The SFT packing check needs the loaded model (``decide_packing``, the one decision taken after loading). Every value
the plan changed from the config is an ``Adjustment`` with its reason, applied through one function (with_values):
``RunPlan.cfg`` holds the changed value, so config.yaml is what trained and re-runs the same; status.json and
train.log carry the reasons. Nothing downstream decides again. Writes nothing (app/train/running/session.py records it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.config.build import with_absolute_paths, with_values
from app.config.resolve import resolve
from app.config.methods import method_of
from app.config.schema import AppConfig
from app.data.convert import require_a_pair
from app.data.loading import sampled_system_prompt
from app.data.mixing import mix_note
from app.data.preference import require_labels, require_pairs
from app.errors import UserError
from app.host import machine as this_machine
from app.host.procs import world_size
from app.host.stack import stack_problem
from app.model.family import Family, check_class, family_of
from app.model.files import ModelFiles
from app.model.load import packed_examples_stay_apart
from app.model.placement import PACKING_KERNELS, Placement, pick_packing, placement
from app.model.shape import linear_attention_layers
from app.model.published import format_line, published_format_problem
from app.model.templates import tool_template_problem
from app.model.unsloth_backend import pick_backend, unsloth_installed
from app.run import layout
from app.tools.toolbox import load_toolbox
from app.train.planning.adjustments import Adjustment, Steps, adjustment_lines
from app.train.planning.experts import Experts, as_decided, plan_experts, unsloth_experts
from app.train.planning.fastpaths import FastPaths, decide, detect_env, fit_generation_to_data, linear_kernels
from app.train.planning.fsdp import check_fsdp
from app.train.planning.images import Vision, check_image_rows, plan_images
from app.train.planning.memory import CARDS_GB, Decisions, card_answer, estimate_memory, rounded, verdict
from app.train.planning.precision import precision_lines
from app.train.planning.preflight import fit_memory, token_lengths
from app.train.planning.reward_checks import check_reward, judge_answers, reference_match
from app.train.planning.rows import training_rows
from app.train.planning.teacher import TeacherPlan, plan_teacher, probe_outside


@dataclass(frozen=True)
class RunPlan:
    cfg: AppConfig  # resolved, absolute paths, every adjustment applied: what trains and what config.yaml says
    where: Placement
    backend: str  # hf | unsloth
    world_size: int
    estimate: dict  # app.train.planning.memory.estimate_memory of cfg with the plan's decisions (memory_decisions)
    lengths_known: bool  # the estimate used the data's token lengths (else max_length)
    fast: FastPaths
    context: int | None = None  # the model's context in tokens; None: its config does not say, or not on disk
    packing: bool | None = None  # SFT, after decide_packing
    adjustments: tuple[Adjustment, ...] = ()
    notes: tuple[str, ...] = ()  # every line the plan said, adjustments' reasons included
    fitted: bool = False  # fitting the card changed a setting or dropped a fast path
    # What planning prepared on the way (None where not at hand); not part of the plan's identity.
    train_ds: Any = field(default=None, compare=False, repr=False)  # the rows in TRL's format, fitted to the context
    tokenizer: Any = field(default=None, compare=False, repr=False)
    lengths: Any = field(default=None, compare=False, repr=False)  # the data's token lengths the estimate used
    tools: Any = field(default=None, compare=False, repr=False)  # app.tools.toolbox.Toolbox of a tool run, checked
    vision: Vision | None = None  # a run on images (app/train/planning/images.py); None: text
    experts: Experts | None = None  # a mixture-of-experts model (app/train/planning/experts.py); None: dense
    family: Family | None = None  # its class and chat template (app/model/family.py); None: files not on disk
    teacher: TeacherPlan | None = None  # a distillation run's teacher (app/train/planning/teacher.py)
    # the model's files as this plan read them, once (config.json, its meta-device shell): what later estimates read
    model_files: ModelFiles | None = field(default=None, compare=False, repr=False)

    def decisions(self) -> Decisions:
        """What the memory estimate reads of this plan. A plan on the CPU is estimated as the same plan on a GPU
        (bf16): the figure a user sizing a card wants."""
        f = self.fast
        packing = self.packing if self.packing is not None else expected_packing(self.cfg, self.where, self.backend)
        return Decisions(cuda=True, dtype=self.where.compute_dtype if self.where.cuda else "bf16", packing=packing,
                         sampler="vllm" if f.vllm else f.sampler, completions_at_once=f.completions_at_once,
                         compiled=f.sampler == "merged", offloading=f.offloading or self.backend == "unsloth",
                         vision_params=(self.vision.tower_params or 0) if self.vision else 0,
                         census=self.experts.census if self.experts else None, model_files=self.model_files,
                         teacher=self.teacher)

    def estimated(self) -> "RunPlan":
        """This plan with its memory estimate made of its own decisions."""
        return replace(self, estimate=estimate_memory(self.cfg, self.lengths, self.decisions()))

    @property
    def verdict(self) -> str | None:
        """The verdict (a word of app.train.planning.memory.VERDICTS) for the card this plan is for; None on the CPU."""
        if not self.where.cuda:
            return None
        return "fits with changes" if self.fitted else verdict(self.estimate.get("total_gb"), self.where.vram_gb)

    def describe(self) -> str:
        """A few short lines for --dry-run and the run log: the card asked about answered first."""
        est = self.estimate
        where = (f"on this {self.where.vram_gb:.0f} GB GPU" if self.where.vram_gb and not self.where.planned
                 else f"on {self.where.gpu}" if self.where.planned else "for a GPU (this run is on the CPU)")
        basis = "the data's token lengths" if self.lengths_known else "max_length (data not read)"
        answer = f"{card_answer(est, self.where.vram_gb, self.verdict)}; " if self.where.cuda else ""
        lines = [f"memory estimate {where}: {answer}{est['summary']} (from {basis})",
                 f"fast paths: {self.fast.describe()}",
                 f"runs on {self.where.gpu or 'the CPU'}, {self.where.compute_dtype}, backend {self.backend}, "
                 f"{self.world_size} process(es)"]
        lines += [self.family.line()] if self.family and self.family.has_template else []  # else a note said it
        lines += precision_lines(self) + [f"adjusted {line}" for line in adjustment_lines(self.adjustments)]
        return "\n".join(lines)

    def status_fields(self) -> dict:
        """What status.json records of the plan (fast_paths is updated if a fallback changes it mid-run)."""
        est = self.estimate
        return {"memory_estimate_gb": est["total_gb"], "memory_estimate": {
                    "torch_peak_gb": rounded(est.get("torch_peak_gb")), "total_gb": rounded(est["total_gb"]),
                    "for": self.where.gpu if self.where.cuda else "a GPU (bf16)"},
                "fast_paths": self.fast.describe(),
                "world_size": self.world_size, "backend": self.backend, "compute_dtype": self.where.compute_dtype,
                "adjustments": adjustment_lines(self.adjustments, brief=True),  # config.yaml: the whole reasons
                **({layout.VISION: self.vision.record()} if self.vision else {}),
                **({layout.EXPERTS: self.experts.record()} if self.experts else {}),
                **({"family": self.family.record()} if self.family else {}),
                **({layout.TEACHER: self.teacher.record()} if self.teacher else {}),
                **({"published_as": published} if self.model_files and (published := format_line(
                    self.model_files.config)) else {})}

    def config_yaml(self) -> str:
        """config.yaml: the config that trains, with what the plan changed (and why) as comments on top."""
        head = "".join(f"# {line}\n" for line in adjustment_lines(self.adjustments))
        if head:
            head = "# qlora-app adjusted these values for this run (the values below are what trained):\n" + head
        return head + self.cfg.to_yaml()


def expected_packing(cfg: AppConfig, where: Placement, backend: str) -> bool | None:
    """SFT packing as the plan expects it before the model loads (decide_packing measures it after): on where the
    attention kernel keeps packed examples apart; None for GRPO."""
    if not method_of(cfg).trains_whole_examples:
        return None
    return pick_packing(cfg.training.packing, "unsloth" if backend == "unsloth" else where.attention,
                        cfg.model.trust_remote_code)


def answer_tokens(cfg: AppConfig) -> int:
    """New tokens an evaluation gives each answer (the held-out points during training, the proof at the end):
    what GRPO or distillation lets a completion take; compare's default for the other methods."""
    return method_of(cfg).answer_tokens(cfg)


def late_for_unsloth() -> bool:
    """Whether this process imported transformers / trl / peft already: Unsloth patches them at import, so it can
    only be used when it comes first (a fresh `qlora-app train` process; not a test runner or a notebook that
    loaded transformers before)."""
    return any(m in sys.modules for m in ("transformers", "trl", "peft"))


def decide_machine(cfg: AppConfig, card_gb: float | None = None) -> tuple[Placement, str]:
    """(placement, backend) of a run: this machine's device as runtime.device picks it, or a planned CUDA card of
    ``card_gb`` GB (train --dry-run --gpu-memory). Decided once per run, before anything imports transformers (the
    session imports Unsloth first when the backend is Unsloth)."""
    facts = this_machine.planned_card(card_gb) if card_gb else this_machine.device_facts(cfg.runtime.device)
    where = placement(cfg.model, facts=facts)
    usable = unsloth_installed() and not late_for_unsloth()
    backend = pick_backend(cfg.runtime.backend, where.cuda, usable, installed=unsloth_installed())
    return where, backend


def keeps_best(cfg: AppConfig, say) -> dict:
    """Early stopping makes the best held-out point's adapter the run's: it must be kept as the run trains
    (training.keep_best), or a run that stops would have only its last. Without held-out points (eval_every 0: a
    preset's early stopping under a run that turned the points off) there is nothing to stop on: it is turned off,
    and said."""
    stop = cfg.training.early_stop
    if stop.on and cfg.training.eval_every == 0:
        say("early stopping is off for this run: training.eval_every is 0, so there is no held-out curve to stop on")
        return {"training.early_stop.patience": 0}
    if not stop.on or cfg.training.keep_best:
        return {}
    say(f"early stopping (after {stop.patience} held-out points without a rise) keeps the best point's adapter as "
        "the run trains and makes it the run's adapter")
    return {"training.keep_best": True}


def make_plan(cfg: AppConfig, rows=None, det=None, *, machine: tuple[Placement, str] | None = None,
              note=None, base: str | Path | None = None, offline: bool = False,
              model_files: ModelFiles | None = None) -> RunPlan:
    """Plan a run of ``cfg`` on ``rows`` (the training split; None: data not read) with detection ``det`` on
    ``machine`` (decide_machine's (placement, backend); None: decided here). ``note(line)`` hears each change as it
    is made; ``offline``: read the model's files only from disk and never fail for their absence (--dry-run,
    doctor); ``model_files``: the model's files as a plan of it read them already (card_verdicts plans one model
    for several cards: its config, tokenizer and shell are read once). Raises UserError for a run that cannot go
    ahead there."""
    steps = Steps(note)
    asked_system = cfg.data.system_prompt
    cfg = resolve(with_absolute_paths(cfg, base or Path.cwd()), num_rows=len(rows) if rows is not None else None)
    sampled = sampled_system_prompt(cfg.data.dataset) if asked_system is None else None
    if sampled and sampled != cfg.data.system_prompt:
        steps.say("the answers in this pairs folder were sampled for prompts with this system prompt (its "
                  ".qlora-pairs.json): the run trains, chats and compares with it")
        cfg = steps.apply(cfg, {"data.system_prompt": sampled})
    where, backend = machine or decide_machine(cfg)
    model_files = model_files or ModelFiles.read(cfg.model)  # config.json, once for the whole plan
    check_fsdp(cfg.runtime, where.cuda)
    method = method_of(cfg)
    stack = stack_problem(method.rewarded, where.cuda)
    if stack:
        raise UserError(stack)
    world = world_size()
    if method.rows == "pair" and det is not None:
        require_pairs(det)  # before any model file is read
        if rows is not None:
            require_a_pair(rows, det)
    if method.rows == "labelled" and det is not None:
        require_labels(det)  # good and bad answers, unpaired or as pairs
    if det is not None and det.mix:  # how the mix was drawn, said with the run's other decisions
        steps.say(mix_note(det))
    if det is not None and det.reasons.get("leaks"):  # held-out rows that repeat training rows, left out
        steps.say(det.reasons["leaks"])
    tools = plan_tools(cfg, steps.say)  # the user's tool files, checked before any model file is read
    check_reward(cfg, steps.say, offline)  # and the reward's files, endpoint and judge
    teacher = plan_teacher(cfg, model_files, steps.say, offline)  # a distillation's teacher, from its small files
    steps.settle()
    cfg = steps.apply(cfg, keeps_best(cfg, steps.say))
    cfg = steps.apply(cfg, reference_match(cfg, rows, det, steps.say))
    if not offline:  # the dry run asks the judge itself (cli/plan_report): a plan for another machine does not
        judge_answers(cfg, rows, det, steps.say)
    cfg, vision, experts, backend = _model_kind(cfg, det, rows, steps, offline, backend, model_files)
    lengths = token_lengths(cfg, rows, det, model_files.tokenizer_on_disk(cfg.model) if rows is not None else None,
                            extra_text=tools.prompt_text() if tools else "", vision=vision)

    fit = fit_memory(cfg, lengths, detect_env(where.cuda, backend), where.vram_gb, steps.say,
                     Decisions(dtype=where.compute_dtype if where.cuda else "bf16",
                               packing=expected_packing(cfg, where, backend), offloading=backend == "unsloth",
                               vision_params=(vision.tower_params or 0) if vision else 0,
                               census=experts.census if experts else None, model_files=model_files,
                               teacher=teacher))
    cfg = steps.apply(cfg, fit.changes)
    experts = as_decided(experts, cfg, fit.experts_4bit, steps.say)
    steps.settle()  # the experts' line is news of its own, not a reason for a later change

    tok, context = model_files.tokenizer_and_context(cfg.model, offline or cfg.runtime.local_only, quiet=offline)
    check_image_rows(vision, lengths, context)  # rows with images are never cut: one that cannot fit is refused
    if tok is None and offline:
        steps.say("the model's context was not checked: its files are not on disk yet")
    family = family_of(cfg.model, tok, model_files.config)
    if family and not family.has_template:
        steps.say(family.line())
        steps.settle()
    problem = tool_template_problem(tok, cfg.model.name_or_path) if tools and tok is not None else None
    if problem:
        raise UserError(problem)
    train_ds = None
    if tok is not None and rows is not None:
        cfg, train_ds = training_rows(cfg, rows, det, tok, context, vision, tools, steps, teacher)
    if not offline:  # an outside teacher before the student loads: up, log-probabilities, the data's tokens, speed
        teacher = probe_outside(teacher, train_ds, tok, cfg.model.name_or_path, steps.say)
    cfg, fast = _fast_paths(cfg, fit, linear_attention_layers(model_files.config), train_ds, world, steps)
    return RunPlan(cfg=cfg, where=where, backend=backend, world_size=world, estimate={},
                   lengths_known=lengths is not None, fast=fast, context=context, adjustments=tuple(steps.adjustments),
                   notes=tuple(steps.said), fitted=fit.fitted, train_ds=train_ds, tokenizer=tok,
                   lengths=lengths, tools=tools, vision=vision, experts=experts, family=family,
                   model_files=model_files, teacher=teacher).estimated()


def _fast_paths(cfg: AppConfig, fit, linear: int, train_ds, world: int, steps: Steps) -> tuple[AppConfig, FastPaths]:
    """(cfg, FastPaths): the GPU fast paths for what fits, the linear-attention kernels said, and GRPO's generation
    batch fitted to the data (recorded as the explicit size it now is, so a re-run samples the same)."""
    fast = decide(cfg, fit.env, fit.needs_room, copy_fits=fit.copy_fits, linear_layers=linear)
    kernels_line = linear_kernels(linear, fit.env)[1]
    if kernels_line:
        steps.say(kernels_line)
    if method_of(cfg).rewarded and train_ds is not None:  # TRL drops an incomplete generation batch
        fitted = fit_generation_to_data(fast, cfg, len(train_ds), world, steps.say)
        if fitted != fast:
            cfg = steps.apply(cfg, {"grpo.generation_batch_size": fitted.completions_at_once})
            fast = decide(cfg, fit.env, fit.needs_room, copy_fits=fit.copy_fits, linear_layers=linear)
    return cfg, fast


def _model_kind(cfg: AppConfig, det, rows, steps: Steps, offline: bool, backend: str, files: ModelFiles):
    """(cfg, Vision, Experts, backend): images load the model that reads them; experts are counted as they load."""
    vision, changes = plan_images(cfg, det, rows, steps.say, offline, files)
    cfg = steps.apply(cfg, changes)
    check_class(cfg.model, files.config)  # a family with no class a run trains: one line, before anything loads
    problem = published_format_problem(cfg.model, files.config)  # GPTQ, AWQ, ...: one line before anything loads
    if problem:
        raise UserError(problem)
    published = format_line(files.config)  # MXFP4 / FP8: dequantized a tensor at a time as they load
    if published:
        steps.say(f"model published in {published}: each tensor is dequantized as it loads (transformers' own "
                  "operation), then loads as the 16-bit upload would" + (" (NF4 from the dequantized values)"
                                                                         if cfg.model.load_in_4bit else ""))
    if (vision or published) and backend == "unsloth":
        steps.say("backend hf: the Unsloth backend loads 16-bit text checkpoints here; transformers + bitsandbytes "
                  "load this one")
        backend = "hf"
    experts = plan_experts(cfg, files, vision.kept_16bit if vision else ())
    backend, changes = unsloth_experts(experts, cfg, backend, steps.say)
    cfg = steps.apply(cfg, changes)  # experts on auto planned 16-bit: the fit check then never makes them 4-bit
    steps.settle()
    return cfg, vision, experts, backend


def plan_tools(cfg: AppConfig, say):
    """The run's Toolbox (None without tools), every tool file checked, and what the tools change, said once."""
    if not cfg.tools.enabled:
        return None
    box = load_toolbox(cfg.tools)
    t, g = cfg.tools, cfg.grpo
    env = f"; environment {box.environment.__name__}" if box.environment else ""
    say(f"tools: {', '.join(f'{n} ({o})' for n, o in box.origins.items())}{env}; up to {g.max_tool_calls} round(s) "
        f"of calls per completion (grpo.max_tool_calls), whose results and the answer after them count within "
        f"grpo.max_completion_length={g.max_completion_length} (the memory estimate's sequence); a call may take "
        f"{t.timeout_s:g} s and show {t.max_output_chars} characters")
    return box


def decide_packing(plan: RunPlan, model, attention: str, note=None) -> RunPlan:
    """SFT packing, measured on the loaded ``model`` running ``attention`` (app.model.load.packed_examples_stay_apart):
    where packed examples would read each other, auto turns packing off (an adjustment) and an explicit true is
    refused."""
    cfg = plan.cfg
    if not method_of(cfg).trains_whole_examples:
        return plan
    kept_apart, why = True, ""
    # FSDP shards the model only inside the trainer: before that it cannot run a forward to measure
    if (cfg.training.packing is not False and attention in PACKING_KERNELS and not cfg.model.trust_remote_code
            and not cfg.runtime.fsdp):
        name = type(model).__name__
        try:
            kept_apart = packed_examples_stay_apart(model)
            why = f"{name} lets packed examples attend to each other (measured)"
        except Exception as e:  # noqa: BLE001 - a forward with restarting positions failed: packing would too
            kept_apart, why = False, f"a packed forward failed on {name} ({type(e).__name__})"
    packing = pick_packing(cfg.training.packing, attention, cfg.model.trust_remote_code, kept_apart)
    if kept_apart or cfg.training.packing is not None:
        return replace(plan, packing=packing).estimated()
    steps = Steps(note)
    steps.say(f"packing is off: {why}, so each example trains in its own padded row")
    off = steps.apply(cfg, {"training.packing": False})
    return replace(plan, cfg=off, packing=False, adjustments=plan.adjustments + tuple(steps.adjustments),
                   notes=plan.notes + tuple(steps.said)).estimated()


def replan(plan: RunPlan, changes: dict, reason: str) -> RunPlan:
    """The plan with ``changes`` applied mid-run (the out-of-memory ladder): the fast paths decided again on the
    changed config, the estimate made again, the change recorded as an adjustment with ``reason``."""
    steps = Steps(said=[reason])
    cfg = steps.apply(plan.cfg, changes)
    env = detect_env(plan.where.cuda, plan.backend)
    fast = decide(cfg, replace(env, vllm=plan.fast.vllm), plan.fast.offloading,
                  copy_fits=plan.fast.sampler == "merged",
                  linear_layers=linear_attention_layers(plan.model_files.config if plan.model_files else None))
    return replace(plan, cfg=cfg, fast=fast, adjustments=plan.adjustments + tuple(steps.adjustments),
                   notes=plan.notes + (reason,)).estimated()


def card_verdicts(cfg: AppConfig, rows=None, det=None, model_files: ModelFiles | None = None
                  ) -> tuple[dict, RunPlan | None]:
    """({card GB: verdict}, the plan on the largest card): the run planned for each card of
    app.train.planning.memory.CARDS_GB as `train --dry-run --gpu-memory GB` plans it. A verdict is "fits", "fits with
    changes" (the plan fitted it: a smaller generation batch, offloading, sampling without the 16-bit copy), "tight"
    (above 90 % of the card) or "too big" (refused). Reads the model's small files once (``model_files``: as a plan of
    the same model read them). A run refused on every card for another reason than memory raises that UserError."""
    resolved = resolve(with_absolute_paths(cfg, Path.cwd()))
    model_files = model_files or ModelFiles.read(resolved.model)
    # a run refused on the largest card with the fit check off is refused for something else than memory (no
    # teacher, a bad reward file): that one line, not "too big" for every card
    make_plan(with_values(cfg, {"runtime.fit_check": False}), rows, det, offline=True, model_files=model_files,
              machine=decide_machine(cfg, card_gb=CARDS_GB[-1]))
    plans: dict = {}
    for gb in CARDS_GB:
        try:
            plans[gb] = make_plan(cfg, rows, det, machine=decide_machine(cfg, card_gb=gb), offline=True,
                                  model_files=model_files)
        except UserError:
            plans[gb] = None
    roomy = plans[CARDS_GB[-1]]
    out = {gb: plan.verdict if plan is not None else "too big" for gb, plan in plans.items()}
    return out, roomy
