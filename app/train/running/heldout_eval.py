"""Held-out evaluation during training (training.eval_every): greedy answers to a fixed seeded sample of held-out rows,
scored with the run's shaped reward, through compare's own generate / score_cell / summary (one evaluator).

Points go into metrics.jsonl as eval/accuracy (with its 95% interval, eval/accuracy_low / _high: Wilson's, on the
rows it judged), eval/reward and eval/<component>, on the line of their step (every ``eval_every`` steps, on logged
steps when automatic, and at the last step; the base before training is what `compare` measures). A distillation run
adds eval/divergence (KL from its teacher on the same answers). Preference data adds eval/pref_accuracy,
eval/pref_margin and eval/pref_likelier on the same rows' pairs (app/eval/preference.py; the base's "chosen more
likely" goes to status.json once). Each point's score (accuracy; for data without references the preference accuracy
of its pairs, else the mean reward) goes to the run's ``BestPoint`` (early_stop.py: the best point, in status.json
and the checkpoints, and early stopping); with training.keep_best the best point's adapter is kept in
RUN/adapter-best/. Rank 0 only. transformers is imported at module level (TrainerCallback).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from transformers import TrainerCallback

from app.ask.asking import Asker
from app.eval.compare import score_cell
from app.eval.divergence import answer_divergence
from app.eval.preference import compare_pairs
from app.eval.result import side_summary
from app.eval.uncertainty import share_interval
from app.model.generation import format_prompt
from app.model.load import eval_keeping_4bit
from app.model.placement import context_length
from app.run import layout, store
from app.train.methods.checkpoints import save_adapter
from app.train.running.early_stop import BestPoint

log = logging.getLogger("qlora_app")
POINTS = 10  # auto eval_every: about this many points per run


def eval_every(setting: int | None, max_steps: int, logging_steps: int = 1) -> int:
    """Steps between evaluations: the setting, or about POINTS per run on logged steps (0 = off)."""
    if setting is not None:
        return setting
    if max_steps <= 0:
        return 0
    raw = max(1, max_steps // POINTS)
    return max(logging_steps, raw // logging_steps * logging_steps)


class HeldoutEval(TrainerCallback):
    def __init__(self, run_dir: Path, items: list[dict], tok, reward_cfg, every: int | None, max_new_tokens: int,
                 keep_best: bool = False, sink: dict | None = None, record=None, beta: float = 0.1, run_cfg=None,
                 rewards=None, processor=None, teacher=None, best: BestPoint | None = None):
        """``sink``: step -> values, the dict RunDirCallback merges into that step's metrics line; ``record(status,
        **fields)``: the session's record of the run (status.json keeps the best point); ``beta``: DPO's, for the
        reward margin of held-out preference pairs (items with a "pair"); ``run_cfg``: the run's config, whose tools
        (if any) answer with the model as in training (app/ask/asking.py); ``rewards``: the run's own reward
        functions (a GRPO run's: one judge in memory), else the shaped reward is built for scoring; ``processor``:
        a model that reads images, whose held-out rows are asked with their images; ``teacher``: a distillation
        run's, whose divergence from the model on the held-out answers is logged too (app/eval/divergence.py);
        ``best``: the run's best point and early stopping, which hears each point's score."""
        self.teacher = teacher
        self.rewards, self.processor = rewards, processor
        self.run_cfg = run_cfg
        self.beta, self.base_logps = beta, None
        self.record = record or (lambda status, **fields: None)
        self.run_dir, self.items, self.tok, self.reward_cfg = Path(run_dir), items, tok, reward_cfg
        self.sink = sink if sink is not None else {}
        self.setting, self.max_new_tokens, self.keep_best = every, max_new_tokens, keep_best
        self.texts = [format_prompt(tok, it) for it in items]
        self.every = 0
        st = store.read_status(run_dir) or {}
        self.best = best or BestPoint(record=self.record, restored=st)
        self.done: set[int] = set()
        self.seconds = float(st.get(layout.EVAL_SECONDS) or 0.0)  # what the evaluations cost, for the record

    def on_train_begin(self, args, state, control, model=None, **kw):
        self.every = eval_every(self.setting, state.max_steps, args.logging_steps)

    def on_step_end(self, args, state, control, model=None, **kw):
        step = state.global_step
        if self.every and self.texts and (step % self.every == 0 or step == state.max_steps):
            self.evaluate(model, step)

    def evaluate(self, model, step: int) -> dict | None:
        if step in self.done:
            return None
        self.done.add(step)
        import torch

        t0 = time.perf_counter()

        # generate() seeds torch's RNG: fork it, so that training samples exactly as it would without evaluations
        # (the model's own GPU only: forking every visible GPU would start CUDA in a run that trains on the CPU)
        device = next(model.parameters()).device
        devices = [device.index or 0] if device.type == "cuda" else []
        context = context_length(model.config)  # a short-context model still gets room for its prompt
        tokens = min(self.max_new_tokens, context // 2) if context else self.max_new_tokens
        with torch.random.fork_rng(devices=devices), eval_keeping_4bit(model):
            asker = Asker(model, self.tok, self.processor, self.run_cfg)
            outs = asker.answers(self.items, max_new_tokens=tokens, batch_size=len(self.texts))
            pref, self.base_logps = compare_pairs(asker, self.items, self.beta, self.base_logps)
            divergence = (answer_divergence(model, self.teacher, self.tok, self.texts, [o["text"] for o in outs])
                          if self.teacher is not None else None)
        summary = side_summary([score_cell(o, it["reference"], self.reward_cfg, it["prompt"], self.rewards)
                                for o, it in zip(outs, self.items)])
        rec = {layout.EVAL_ACCURACY: summary.accuracy, layout.EVAL_REWARD: summary.mean_reward}
        rec.update({f"{layout.EVAL_PREFIX}{k}": v for k, v in summary.components.items()})
        if divergence is not None:
            rec[layout.EVAL_DIVERGENCE] = divergence
        if summary.tool_success is not None:
            rec.update({layout.EVAL_TOOL_SUCCESS: summary.tool_success, layout.EVAL_TOOL_CALLS: summary.tool_calls})
        if pref:
            rec.update({layout.EVAL_PREF_ACCURACY: pref.accuracy, layout.EVAL_PREF_MARGIN: pref.margin,
                        layout.EVAL_PREF_LIKELIER: pref.adapter_likelier})
            self.record(None, **{layout.PREF_BASE_LIKELIER: pref.base_likelier, layout.PREF_ROWS: pref.n})
        # each share's 95% interval on the rows it counts: how far apart two points must be to differ
        for key, share, n in ((layout.EVAL_ACCURACY, summary.accuracy, summary.n_judged),
                              (layout.EVAL_PREF_ACCURACY, pref.accuracy if pref else None, pref.n if pref else 0)):
            interval = share_interval(round(share * n), n) if share is not None else None
            if interval:
                rec.update(zip(layout.interval_keys(key), interval))
        self.sink[step] = rec  # written with the step's own metrics line
        self.seconds += time.perf_counter() - t0
        self.record(None, **{layout.EVAL_SECONDS: round(self.seconds, 2), layout.EVAL_ROWS: len(outs)})
        # the answers' accuracy where the data has references, else the preference accuracy of its pairs
        score = next((x for x in (summary.accuracy, pref.accuracy if pref else None, summary.mean_reward)
                      if x is not None), None)
        if score is not None and self.best.point(step, score) and self.keep_best:
            save_adapter(model, self.tok, self.run_dir, layout.BEST_ADAPTER)
        acc = "-" if summary.accuracy is None else f"{summary.accuracy:.1%}"
        reward = "-" if summary.mean_reward is None else f"{summary.mean_reward:.3f}"
        log.info("held-out at step %d: accuracy %s, reward %s (%d rows, greedy)%s", step, acc, reward, len(outs),
                 f"; preference accuracy {pref.accuracy:.1%}, reward margin {pref.margin:+.3g}, chosen more likely "
                 f"base {pref.base_likelier:.1%} -> adapter {pref.adapter_likelier:.1%} ({pref.n} pairs)"
                 if pref else "")
        return rec
