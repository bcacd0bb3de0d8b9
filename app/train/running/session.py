"""One door for a training run: a Session opens, plans, records and closes every run.

Every run comes through here: `qlora-app train` (app/cli/main.py), the torchrun launcher (app/train/running/launcher.py:
its workers are sessions of their own), the demo (app/demo) and the UI (which starts `qlora-app train` in a
subprocess and only reads the run folder). A run reads top to bottom (``Session.run``):

    open      check the request, decide the machine (Unsloth is imported first when it is the backend), read the
              data, find the resume point;
    plan      every decision of the run, once (app/train/planning/plan.py): resolved config, placement, backend, memory
              estimate and fit, context, fast paths, generation batch;
    create    the run folder, config.yaml (what trains, with what the plan changed and why) and status.json;
    build     the model as planned, packing measured on it, the TRL trainer and its callbacks (running/build.py);
    train     the steps; callbacks report progress to the session; out of GPU memory, the session steps down the
              ladder (app/train/planning/oom.py), records the change and builds again from the last complete checkpoint;
    evaluate  the adapter, peak memory and the curves of the end;
    prove     base vs adapter on held-out rows (training.proof_rows): the run's proof, RUN/compare.json
              (app/run/proof.py), and our model card in the adapter folder;
    close     the final status on success, bad input, fault or interrupt, and the exit code.

Owns: the run's recipe, each step once, in order. What it records goes through its ``RunRecord``
(app/run/record.py: the only writer of config.yaml and status.json, tests/structure/test_one_door.py); other
modules report to the session (``record``, ``note``, ``warn``). Must not decide what the plan decides, nor change
anything of the process beyond its own run (process-wide settings are app/host's, made at the entry points).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from app.config.build import load_yaml_file, validate
from app.config.keys import changed_keys
from app.config.methods import method_of
from app.config.resolve import model_name, warnings_for
from app.config.schema import AppConfig
from app.data import build_splits
from app.errors import RunFailed, UserError
from app.eval.compare import run_comparison
from app.eval.heldout import sample_examples
from app.export.card import write_card
from app.host.procs import is_main
from app.host.threads import ThreadGovernor
from app.model.source import check_model_source, run_model_hint
from app.model.unsloth_backend import import_first
from app.run import integrity, layout, store
from app.run.counts import RunCounts
from app.run.curves import save_curves
from app.run.diagnosis import Facts
from app.run.faults import nonfinite_message
from app.run.record import RunRecord
from app.run.summary import comparison_text, early_stop_text, memory_check, peak_memory_text
from app.run.watch import Watch
from app.train.planning.oom import Faults, free_memory, is_oom, memory_word, next_attempt
from app.train.planning.plan import RunPlan, answer_tokens, decide_machine, decide_packing, make_plan, replan
from app.train.planning.request import (
    check_request,
    check_same_world,
    check_user_code,
    require_checkpoint,
    resumable_dir,
    resume_point,
)
from app.train.running import peakmem
from app.train.running.build import attach_callbacks, build_trainer, load_model, run_rewards
from app.train.running.runlog import close_logging, setup_logging

log = logging.getLogger("qlora_app")
INTERRUPTED_EXIT = 130  # 128 + SIGINT: what shells report for a Ctrl-C'd command
PROOF_BATCH = 32  # prompts the proof generates at once


class Session:
    """One run. ``run()`` trains it here; ``launch()`` runs it on torchrun's workers."""

    def __init__(self, cfg: AppConfig, *, resume: Path | None = None, run_dir: Path | None = None,
                 progress: bool = True, console=None):
        self.request = cfg  # as the user gave it; the plan holds what trains
        self.resume_from = Path(resume) if resume is not None else None
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.progress, self.console = progress, console
        self.main = is_main()  # only rank 0 writes the run folder and speaks; every rank trains
        self.rec = RunRecord(self.main)  # the one writer of config.yaml and status.json (app/run/record.py)
        self.plan: RunPlan | None = None
        self.ckpt: Path | None = None  # the checkpoint training continues from
        self.handler = None  # train.log
        self.busy: list[str] = []  # said with the plan's notes, once the run folder exists
        self.status: str | None = None  # the final status word, once the steps ended
        self.final: dict = {}  # what the end adds to status.json (step, peak memory)
        self.oom_changes: list[dict] = []  # the ladder's steps, as status.json records them
        self.sampler_changes: list[dict] = []  # the fast sampler's fallbacks, as status.json records them
        self.exit_code = 0
        # read or decided by open(): the injected faults, (placement, backend), the CPU threads, the data
        self.faults: Faults | None = None
        self.machine = None
        self.threads: ThreadGovernor | None = None
        self.rows = self.heldout_rows = self.det = None
        self.bar = None  # the terminal's progress bar of the current attempt
        self.best = None  # the held-out curve's best point and early stopping (app/train/running/early_stop.py)
        # the run's counts over every attempt (app/run/counts.py): reward failures, tool calls, judgements, and the
        # diagnosis (why the reward may be flat: app/run/diagnosis.py), handed as one object to all that counts
        self.counts = RunCounts()
        # a GRPO run's reward functions and weights, made once (app.train.running.build.run_rewards)
        self.rewards = None
        self.said_before: list[dict] | None = None  # a resumed run's diagnosis, as its earlier attempts said it

    @property
    def dir(self) -> Path | None:
        """The run folder (None until it is made or, for a resume, found)."""
        return self.rec.dir

    @dir.setter
    def dir(self, folder: Path | None) -> None:
        self.rec.dir = folder

    # ------------------------------------------------------------------------------------------------ the recipe
    def run(self) -> Path:
        """Train the run and return its folder. Bad input raises UserError (exit 2) with nothing saved lost; a
        fault raises RunFailed (exit 1); a stop leaves it interrupted and resumable (exit_code 130)."""
        try:
            self.open()
            self.plan_run()
            self.create()
            with self.recording():
                trainer, watch, stop, loaded = self.build()
                while (out_of_memory := self.train(trainer, stop)) is not None:
                    step = trainer.state.global_step + 1  # the step that ran out
                    trainer = watch = loaded = None  # the attempt's model and trainer go before the next loads
                    self.step_down(out_of_memory, step)
                    trainer, watch, stop, loaded = self.build()
                self.evaluate(trainer, watch, stop, loaded)
                # the proof loads the model its own way (and a judge of its own: the run's goes with its rewards)
                trainer = watch = loaded = self.rewards = None
                self.prove()
                self.close()
        finally:
            close_logging(self.handler)
        return self.dir

    def open(self, launcher: bool = False) -> None:
        """Check the request and read what it needs (data, resume point) before anything is made. The launcher's
        session stops after the checks: its workers decide the machine and load the rest."""
        cfg = self.request
        self.faults = Faults()  # QLORA_APP_FAULT: a bad value is one line before anything is made
        if self.resume_from is not None:
            self.dir = resumable_dir(self.resume_from, self.main)
            check_same_world(validate(load_yaml_file(self.dir / layout.CONFIG)).runtime, cfg.runtime)
            require_checkpoint(self.dir)
        check_request(cfg)
        check_user_code(cfg)  # before any folder is made and before the data is read
        if not launcher:
            self.machine = decide_machine(cfg)
            import_first(self.machine[1])  # before anything imports transformers / trl / peft
            self.threads = ThreadGovernor(cfg.runtime.threads, note=self.busy.append)
        check_model_source(model_name(cfg), cfg.runtime.local_only, hint=run_model_hint(cfg))  # before data
        # Data first: a wrong column name should fail in a second, not after the model has loaded.
        self.rows, self.heldout_rows, self.det = build_splits(cfg.data, cfg.training.seed,
                                                              local_only=cfg.runtime.local_only,
                                                              labelled=method_of(cfg).rows == "labelled")
        if self.dir is not None and not launcher:  # nothing to resume is said first, and leaves the run as it was
            self.handler = setup_logging(self.dir) if self.main else None
            self.ckpt = resume_point(self.dir, self.note if self.main else None, cfg, self.main)
            # a run's counts are the whole run's: the resumed part adds to what the earlier attempts made
            status = store.read_status(self.dir) or {}
            self.counts.restore(status)
            self.said_before = status.get(layout.DIAGNOSIS)

    def plan_run(self) -> None:
        """Every decision of the run, once; a run the plan refuses leaves no folder behind."""
        self.plan = make_plan(self.request, self.rows, self.det, machine=self.machine)
        # what the run's curves show, watched as it trains (a resumed run keeps what it said before)
        self.counts.diagnosis = Watch(Facts.of(self.plan.cfg), self.said_before)

    def create(self) -> None:
        """The run folder, config.yaml and status.json (a resume keeps its folder and updates them)."""
        try:
            if self.dir is None:
                cfg = self.plan.cfg
                self.rec.create(cfg.output_dir, cfg.run_name, cfg.method, cfg.data.datasets, self.run_dir)
                self.handler = setup_logging(self.dir) if self.main else None
            if self.main:
                self._record_start()
        except BaseException as e:
            self._fail(e)

    def build(self):
        """The model as planned (SFT packing measured on it), the trainer and its callbacks."""
        plan = self.plan
        loaded = load_model(plan)
        log.info("model %s loaded (4-bit=%s, compute %s, %s, backend %s)", plan.cfg.model.name_or_path,
                 loaded.quantized, plan.where.compute_dtype, plan.where.gpu or "CPU", plan.backend)
        if plan.cfg.model.load_in_4bit and not loaded.quantized:  # a user sizing a GPU must hear it in plain words
            self.note(f"transformers quantized none of the layers of {type(loaded.model).__name__} (its "
                              "architecture is not covered by its 4-bit loader): the model trains unquantized, at "
                              "full size")
        packed = decide_packing(plan, loaded.model, loaded.attention, self.note if self.main else None)
        if packed.cfg != plan.cfg:
            self._replan(packed)
        self.plan = plan = packed
        if self.rewards is None:
            self.rewards = run_rewards(plan, self.det.reference_field is not None, self.counts)
        trainer = build_trainer(plan, loaded, self.dir, self.counts, self.rewards,
                                on_sampler_change=self._sampler_changed)
        if self.main:
            log.info("world size %d (%s)", trainer.args.world_size, trainer.accelerator.state.distributed_type)
        t = plan.cfg.training
        heldout = sample_examples(self.heldout_rows, self.det, t.eval_rows, t.seed, plan.cfg.data.system_prompt)
        watch, stop, self.bar, self.best = attach_callbacks(trainer, self, loaded.tokenizer, heldout,
                                                            loaded.processor)
        return trainer, watch, stop, loaded

    def train(self, trainer, stop) -> str | None:
        """The steps, from the resume point when there is one. Returns None when they ended, or the error's line
        when they ran out of GPU memory (the caller steps down the ladder and builds again)."""
        try:
            trainer.train(resume_from_checkpoint=str(self.ckpt) if self.ckpt else None)
            return None
        except Exception as e:
            if not is_oom(e):
                raise
            return str(e).split("\n")[0][:200]  # the text only: the error's traceback holds the step's tensors
        finally:
            self.bar.close()
            stop.uninstall()

    def step_down(self, error: str, step: int) -> None:
        """Out of memory at ``step``: free it, take the ladder's next rung (app/train/planning/oom.py; one line and exit
        1 when it is spent) and continue from the last complete checkpoint, or the start; said in the terminal and
        train.log, recorded in status.json (oom_changes) and config.yaml (what trains, from which step)."""
        changes, what, self.ckpt, start = next_attempt(self.plan, step, error, self.dir)
        free_memory(self.plan.where.cuda)
        memory = memory_word(self.plan.where.cuda)
        self.note(f"out of {memory} at step {step} ({error}); {what}; training again from "
                  f"{self.ckpt.name if self.ckpt else 'the start'}")
        self.plan = replan(self.plan, changes, f"out of {memory} at step {step} ({what}); so from step {start}")
        self.oom_changes.append({"step": step, "from_step": start, "change": what, "error": error})
        if self.main:
            store.truncate_metrics(self.dir, start)  # the steps trained again are logged once
            self.rec.config(self.plan.config_yaml())
            self.record(None, oom_changes=self.oom_changes, **self.plan.status_fields())

    def evaluate(self, trainer, watch, stop, loaded) -> None:
        """What the end leaves: a run that trained no step or turned NaN is refused; else the adapter, the peak
        memory and the curves."""
        step = trainer.state.global_step
        if step == 0 and not stop.requested:  # TRL / HF say "not a single sample", then finish
            raise UserError(f"no training step ran: the {len(self.plan.train_ds)} training rows gave no full batch; "
                            "lower training.per_device_train_batch_size or gradient_accumulation_steps, or add rows")
        if watch.nonfinite:
            self.record(layout.FAILED, step=step)
            raise RunFailed(nonfinite_message(watch.nonfinite, self.plan.cfg, self.dir))
        self.status, self.final = (layout.INTERRUPTED if stop.requested else layout.FINISHED), {"step": step}
        if not self.main:
            return
        # heavy (transformers' TrainerCallback), imported after import_first: Unsloth must patch transformers first
        from app.train.running.early_stop import run_adapter

        # which adapter is the run's, decided once here and recorded (the proof, the card and export read it)
        adapter, chosen = run_adapter(trainer.model, loaded.tokenizer, self.dir, self.best, step,
                                      self.plan.cfg.training.early_stop)
        self.record(None, step=step, **chosen)  # before the proof, which reads which step's adapter it measures
        said = early_stop_text({**chosen, "step": step})
        if said:
            self.note(f"early stopping: {said}")
        self.final.update(peakmem.sample(self.plan.where.cuda))
        if self.plan.where.cuda:  # every GPU run is a calibration point of the estimate
            self.final["memory_check"] = memory_check(self.plan.estimate, self.final)
        log.info("peak memory: %s", peak_memory_text(self.final))
        if stop.requested:
            log.info("stopped at step %d; checkpoint saved, resume with --resume %s", step, self.dir)
        else:
            log.info("finished at step %d; adapter in %s", step, adapter)
        save_curves(self.dir)

    def prove(self) -> None:
        """A finished run's proof: base vs adapter, greedy, on training.proof_rows held-out rows, scored with the
        run's shaped reward (app/eval/compare.py), kept as RUN/compare.json; then the adapter's model card. A proof
        that cannot be made is said, not a failed run: the adapter is trained and saved."""
        if not self.main or self.status != layout.FINISHED:
            return
        cfg = self.plan.cfg
        rows = min(cfg.training.proof_rows, len(self.heldout_rows))
        if rows:
            free_memory(self.plan.where.cuda)
            try:
                result = run_comparison(self.dir, num_samples=rows, max_new_tokens=answer_tokens(cfg),
                                        batch_size=PROOF_BATCH, seed=cfg.training.seed,
                                        local_only=cfg.runtime.local_only, record="proof",
                                        files=self.plan.model_files,  # what the plan read of the base
                                        teacher=self.plan.teacher.source if self.plan.teacher else None)
                log.info("held-out proof: %s", comparison_text(result.to_dict()))
                said = self.counts.diagnosis.proved(result.summary.base.accuracy, result.summary.adapter.accuracy)
                for notice in said:
                    self.note(notice["message"])
                if said:
                    self.record(None, **{layout.DIAGNOSIS: self.counts.diagnosis.found})
            except Exception as e:  # noqa: BLE001 - the trained adapter stands without its proof
                self.warn(f"no held-out proof was made ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                            f"qlora-app compare --adapter {self.dir} --num-samples {rows} makes one")
        write_card(self.dir / layout.ADAPTER, self.dir, cfg, "adapter", cfg.model.name_or_path, {},
                   adapter_dir=self.dir / layout.ADAPTER)

    def close(self) -> None:
        """The final status of a run that ended on its own or was stopped, and the exit code it gives."""
        self.record(self.status, ended=time.time(), **self.final)
        self.exit_code = INTERRUPTED_EXIT if self.status == layout.INTERRUPTED else 0

    # ------------------------------------------------------------------------------------------------ records
    def record(self, status: str | None = None, **fields) -> None:
        """The one writer of status.json (rank 0): ``status`` None keeps the status word. Other modules report
        through this (the training callbacks, the held-out evaluation, the sampler)."""
        self.rec.status(status, **fields)

    def _record_start(self) -> None:
        """config.yaml (what trains, adjusted values included), status.json and the plan in train.log."""
        plan, resumed = self.plan, self.resume_from is not None
        if not resumed or self._changed_on_resume():
            text = plan.config_yaml()
            if resumed and not plan.adjustments:  # the first start's reasons stay beside its values
                old = (self.dir / layout.CONFIG).read_text().splitlines(keepends=True)
                text = "".join(line for line in old if line.startswith("#")) + text
            self.rec.config(text)
        fields = plan.status_fields()
        if resumed and not plan.adjustments:
            fields.pop("adjustments")  # the first start's reasons stay on record
        now = time.time()  # a new run's creation time is the order runs are listed in (app.run.lookup.created)
        self.record(layout.RUNNING, pid=os.getpid(), started=now, **({} if resumed else {"created": now}),
                    method=plan.cfg.method,
                    model=plan.cfg.model.name_or_path, dataset=plan.cfg.data.label,
                    **({layout.MIX: self.det.mix} if self.det is not None and self.det.mix else {}),
                    step=integrity.checkpoint_step(self.ckpt) if self.ckpt else 0, error=None, **fields)
        for line in warnings_for(plan.cfg) + list(plan.notes) + self.busy:
            self.note(line)
        log.info(plan.describe().replace("\n", "; "))
        log.info("run %s: %s on %s, %d train rows, %d held out; fields: %s", self.dir.name, plan.cfg.method,
                 plan.cfg.data.label, len(self.rows), len(self.heldout_rows), self.det.fields_line())

    def _changed_on_resume(self) -> bool:
        """Whether a resume changes the run's plan (--max-steps N extends it, --set changes a key). config.yaml then
        records the plan the run now follows, so a later bare --resume (the crashed-run hint) continues the same."""
        changed = changed_keys(validate(load_yaml_file(self.dir / layout.CONFIG)), self.plan.cfg)
        if changed:
            log.info("config.yaml updated for this resume: %s", "; ".join(changed))
        return bool(changed)

    def _replan(self, plan: RunPlan) -> None:
        """A decision taken after loading (SFT packing) changed the plan: config.yaml and status.json follow."""
        self.rec.config(plan.config_yaml())
        self.record(None, adjustments=plan.status_fields()["adjustments"])

    def _sampler_changed(self, sampler, reason: str) -> None:
        """status.json's fast paths follow the sampler that samples: a fallback is recorded with its step."""
        fast = replace(self.plan.fast, sampler="merged" if sampler is not None else "plain",
                       compiled=sampler is not None and sampler.compile)
        self.sampler_changes.append({"fast_paths": fast.describe(), "reason": reason})
        self.record(None, fast_paths=fast.describe(), fast_path_changes=self.sampler_changes)

    @contextmanager
    def recording(self):
        """Any way a run ends early is recorded: a stop (second Ctrl-C) as interrupted, bad input or a fault as
        failed with its one line, a failed write as the disk-full line (exit 1)."""
        try:
            yield
        except BaseException as e:
            if self.main and self.dir is not None:  # the counts since the last logged step are not lost either
                try:
                    self.counts.take()
                    self.record(None, **self.counts.status_fields())
                except Exception:  # noqa: BLE001 - a full disk: the failure's own line says so
                    pass
            self._fail(e)

    def _fail(self, e: BaseException):
        out = self.rec.ended_early(e, self.request.output_dir)
        if out is e:
            raise e
        raise out from None

    def note(self, line: str) -> None:
        """A line the user should read (rank 0): the terminal and train.log."""
        self._say("note", line)

    def warn(self, line: str) -> None:
        """A line about something that went wrong but did not stop the run."""
        self._say("warning", line)

    def _say(self, label: str, line: str) -> None:
        log.warning(line)
        if self.console is not None and self.main:
            self.console.print(f"[yellow]{label}:[/] {escape(line)}")

