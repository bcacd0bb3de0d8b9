"""What a run's plan checks and decides of its reward, before any model file is read: the JSON Schema file, the judge
(its rubric, its endpoint under --local-only, a local judge's model; an endpoint asked one real judgement of a
training row), and the reference match ``auto`` picks from the reference column.

Owns: those checks and that choice, said through the plan's ``say``. Must not load a model nor score a run.
"""

from __future__ import annotations

from app.config.methods import method_of
from app.config.schema import AppConfig
from app.data.convert import prompt_text, reference_text
from app.rewards.formats import check_schema
from app.rewards.judge.reward import check_judge, probe_judge
from app.rewards.match import choose_for as choose_match


def check_reward(cfg: AppConfig, say, offline: bool = False) -> None:
    """The reward's checks, before any model file is read (one line each): the JSON Schema file, the judge (rubric,
    endpoint under --local-only, local model; ``offline``: a plan for any machine, whose judge need not be here)."""
    r = cfg.reward
    check_schema(r.json_schema)
    if r.judge.enabled:
        say(check_judge(r.judge, cfg.runtime.local_only, loads=not offline))


def judge_answers(cfg: AppConfig, rows, det, say) -> None:
    """An endpoint judge asked one real judgement of the first training row (its reference as the answer) before the
    model loads: a judge that is down, refuses or cannot score is one line (app/rewards/judge/reward.probe_judge)."""
    j = cfg.reward.judge
    if not (j.enabled and j.url and cfg.reward.weight("judge")) or rows is None or det is None or not len(rows):
        return
    row = rows[0]
    reference = reference_text(row, det)
    say(probe_judge(j, prompt_text(row, det), reference or "", reference))


def reference_match(cfg: AppConfig, rows, det, say) -> dict:
    """The reference match ``auto`` picks from the run's reference column, said with why and recorded: what a GRPO
    run's reward trains with, and what every run's proof scores "correct" by (read from the run, never chosen again
    per row). Returns the change."""
    field = det.reference_field if det is not None else None
    if cfg.reward.reference_match != "auto" or rows is None or field is None:
        return {}
    mode, why = choose_match(rows, lambda row: reference_text(row, det))
    use = "the reward and the proof compare answers" if method_of(cfg).rewarded else "the proof scores answers"
    say(f"reference match: {mode} ({why}); {use} this way; reward.reference_match sets another")
    return {"reward.reference_match": mode}
