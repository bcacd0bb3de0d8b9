"""`qlora-app pairs`: preference pairs from a reward, the offline counterpart of GRPO.

The model (a base, or a run's adapter) answers every prompt of a dataset ``samples`` times at a temperature; the
run's shaped reward (and any custom reward) scores each answer; the best-scored answer is the chosen one and the
worst-scored the rejected one, where their scores differ by min_gap or more. A prompt whose answers all score alike
teaches nothing and makes no pair (it is counted). The folder written is a preference dataset to inspect, edit and
train on with ``qlora-app train --method dpo --dataset OUT``:
    train.jsonl   pairs from the source's training rows;
    test.jsonl    every held-out row of the source (its own test split, or the rows a run holds out with the same
                  seed), with its pair where sampling made one ("" where not): a DPO run on the folder proves itself
                  on the rows the source held out, greedy accuracy and preference accuracy alike;
    .qlora-pairs.json  the settings and progress (a hidden file: dataset loaders skip it).
Each row: prompt (the conversation the answers follow, without the system prompt: that is the folder's setting, which
a run on the folder takes as its own, so training, chat, compare and serve all see the prompt the answers were
sampled for), chosen, rejected, chosen_score, rejected_score, reference.

Resumable: rows are appended a batch at a time and the progress file records the prompts done and the bytes
written, fsync'd in that order; --resume cuts a torn last batch and goes on with the same seeds, so a resumed run
writes what an uninterrupted one would. Owns this file format; heavy libraries are imported where they are used
(app.model.generation, app.models), not here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from app.ask.asking import Asker, uses_tools
from app.config.build import with_absolute_paths
from app.config.resolve import resolve
from app.config.schema import AppConfig
from app.data import build_splits
from app.data.convert import plain_prompt, prompt_messages, reference_text
from app.data.loading import PAIRS_MANIFEST
from app.data.turns import with_system
from app.errors import UserError
from app.model.load import load_base_model
from app.model.pair import find_target, load_pair
from app.model.source import check_model_source
from app.rewards import load_custom, score_completion
from app.run.store import write_atomic

MANIFEST = PAIRS_MANIFEST
SPLITS = (("train", "train.jsonl"), ("test", "test.jsonl"))


@dataclass(frozen=True)
class PairsRequest:
    samples: int = 8  # answers per prompt
    temperature: float = 1.0
    max_new_tokens: int = 128
    max_prompts: int | None = None  # of the training rows
    max_heldout: int = 200  # of the held-out rows: what a DPO run on the folder evaluates on
    batch_prompts: int = 16  # prompts sampled at once (x samples answers)
    # Scores closer than this are alike: the length part alone moves the shaped total by thousandths between two
    # wrong answers, which says nothing about which is better (a missing format line costs 0.5, a wrong answer 2).
    min_gap: float = 0.25

    def check(self) -> None:
        if self.samples < 2:
            raise UserError(f"--samples must be at least 2 (got {self.samples}): a pair needs two answers")
        if self.temperature <= 0:
            raise UserError(f"--temperature must be above 0 (got {self.temperature}): greedy answers are all alike")
        if self.min_gap < 0:
            raise UserError(f"--min-gap must be at least 0 (got {self.min_gap})")
        if min(self.max_new_tokens, self.batch_prompts, self.max_prompts or 1) < 1 or self.max_heldout < 0:
            raise UserError("--max-new-tokens, --batch-size and --max-prompts must be at least 1, --max-heldout at "
                            "least 0")


def _settings(cfg: AppConfig, req: PairsRequest, adapter: str | None, target) -> dict:
    """What decides the pairs: a resume must ask for the same. ``target``: the adapter's, found once."""
    d = cfg.data
    sampled_with = target.base.name_or_path if target is not None else cfg.model.name_or_path
    return {"dataset": d.dataset, "config_name": d.config_name, "prompt_field": d.prompt_field,
            "reference_field": d.reference_field, "model": cfg.model.name_or_path, "adapter": adapter,
            "sampled_with": sampled_with,  # the base that answered (the adapter's own, with one)
            "system_prompt": d.system_prompt, "seed": cfg.training.seed, "reward": cfg.reward.model_dump(mode="json"),
            **asdict(req)}


def _open_folder(out: Path, settings: dict, resume: bool) -> dict:
    """The progress record to continue from (a fresh one when starting; the folder is made by the caller once
    everything else checked out); refuses to write over a folder."""
    path = out / MANIFEST
    if resume:
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            raise UserError(f"'{out}' holds no pairs to resume ({MANIFEST} missing or unreadable); drop --resume to "
                            "start there, or pass the folder an earlier `qlora-app pairs` wrote") from None
        changed = [k for k in settings if manifest["settings"].get(k, settings[k]) != settings[k]]
        if changed:
            raise UserError(f"--resume asks for other settings than '{out}' was made with ({', '.join(changed)}); "
                            "pass the same options, or a new --out folder")
        return manifest
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"'{out}' already exists and is not an empty folder; pass a new --out folder, or --resume "
                        "to continue the pairs written there")
    return {"settings": settings, "complete": False,
            "splits": {name: {"done": 0, "bytes": 0, "pairs": 0, "rows": 0} for name, _ in SPLITS}}


def _save(out: Path, manifest: dict) -> None:
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=2))


def _load_model(cfg: AppConfig, target):
    """(model, tokenizer): the base in 4-bit, or a trained adapter (``target``, found once) on its own run's base."""
    if target is not None:
        pair = load_pair(target, cfg.runtime.local_only, device=cfg.runtime.device)
        return pair.model, pair.tok
    model, tok, _ = load_base_model(cfg.model, local_only=cfg.runtime.local_only, for_training=False,
                                    device=cfg.runtime.device)
    model.eval()
    return model, tok


def _row(prompt: list[dict], reference: str | None, answers: list[str], scores: list[float], test: bool,
         min_gap: float) -> dict | None:
    """The pair one prompt's scored answers make (best vs worst), or None (train) / a row without one (test)."""
    best = max(range(len(scores)), key=lambda i: scores[i])
    worst = min(range(len(scores)), key=lambda i: scores[i])
    made = scores[best] - scores[worst] >= max(min_gap, 1e-9) and answers[best].strip() != answers[worst].strip()
    if not made and not test:
        return None
    return {"prompt": prompt, "chosen": answers[best] if made else "", "rejected": answers[worst] if made else "",
            "chosen_score": round(scores[best], 4), "rejected_score": round(scores[worst], 4), "reference": reference}


def check_text_only(cfg: AppConfig, det, target) -> None:
    """Pairs are sampled from the prompt's text alone: data with pictures, a model trained on them, or a run that
    answers with tools would be sampled otherwise than it trains and is asked; each is one line before the folder
    is made, not pairs that silently drop the pictures or the tool calls."""
    if det.image_field:
        raise UserError(f"pairs samples answers from the prompt's text alone, and this data has pictures (column "
                        f"'{det.image_field}'): its pairs would be answers to questions about pictures nobody saw; "
                        "train on it with --method sft or grpo, or bring preference pairs you have")
    run_cfg = target.run_cfg if target is not None else None
    if target is not None and target.base.images:
        raise UserError("pairs samples answers from the prompt's text alone, and this adapter was trained on "
                        "pictures; pass a text run's adapter (or none: the base answers)")
    if uses_tools(run_cfg) or cfg.tools.enabled:
        raise UserError("pairs samples plain answers, and this run answers with tools (tool calls and their "
                        "results): its pairs would not be the answers it gives; train it further with --method grpo "
                        "--tools ..., or make pairs from a run without tools")


def make_pairs(cfg: AppConfig, out: Path, req: PairsRequest = PairsRequest(), adapter: str | None = None,
               resume: bool = False, on_progress=None, note=None) -> dict:
    """Write (or continue) the pairs folder ``out``; returns its progress record. ``on_progress(done, total)``
    hears each batch; ``note(line)`` hears what the user should know."""
    req.check()
    # the GRPO resolution: the model's default, and the system prompt the shaped reward's format bonus asks for
    cfg = resolve(with_absolute_paths(cfg.model_copy(update={"method": "grpo"}), Path.cwd()))
    out = Path(out)
    target = find_target(adapter) if adapter else None
    manifest = _open_folder(out, _settings(cfg, req, adapter, target), resume)
    for entry in cfg.reward.custom:  # everything is checked before the folder is made
        load_custom(entry)
    if not adapter:
        check_model_source(cfg.model.name_or_path, cfg.runtime.local_only)
    train, heldout, det = build_splits(cfg.data, cfg.training.seed, local_only=cfg.runtime.local_only)
    check_text_only(cfg, det, target)
    if det.reference_field is None and note:
        note("the data has no reference answers: answers are ranked by the reward's format, length and "
             "boilerplate parts only (and any custom reward)")
    splits = {"train": train.select(range(min(len(train), req.max_prompts or len(train)))),
              "test": heldout.select(range(min(len(heldout), req.max_heldout)))}
    total = sum(len(ds) for ds in splits.values())
    done_before = sum(manifest["splits"][name]["done"] for name in splits)
    model, tok = _load_model(cfg, target)
    asker = Asker(model, tok)  # text alone (check_text_only): sampled as every model is asked
    out.mkdir(parents=True, exist_ok=True)
    _save(out, manifest)
    for index, (name, filename) in enumerate(SPLITS):
        ds, prog, path = splits[name], manifest["splits"][name], out / filename
        with open(path, "ab") as f:
            f.truncate(prog["bytes"])  # a batch torn by a crash after its last complete record goes
        for start in range(prog["done"], len(ds), req.batch_prompts):
            rows = ds.select(range(start, min(start + req.batch_prompts, len(ds)))).to_list()
            # the rows keep the conversation without the system turn: the system prompt is the folder's setting
            # (.qlora-pairs.json), which a run on the folder takes as its own (app.data.loading.sampled_system_prompt)
            msgs = [prompt_messages(r, det, None) for r in rows]
            sampled = [with_system(m, cfg.data.system_prompt) for m in msgs]
            # the prompt exactly as a DPO run on the folder renders this row (its system prompt included), with a
            # chat template or without one (app.data.convert's rows: one rule)
            items = [{"messages": m, "plain": plain_prompt(r, det, cfg.data.system_prompt)}
                     for m, r in zip(sampled, rows)]
            # every batch has its own seed: a resumed run samples what an uninterrupted one would have
            outs = asker.answers([it for it in items for _ in range(req.samples)], req.max_new_tokens,
                                 req.temperature, batch_size=len(items) * req.samples,
                                 seed=cfg.training.seed * 1_000_003 + index * 100_003 + start)
            lines = []
            for k, row in enumerate(rows):
                answers = [o["text"] for o in outs[k * req.samples:(k + 1) * req.samples]]
                ref = reference_text(row, det)
                scores = [score_completion(a, ref, cfg.reward)["total"] for a in answers]
                made = _row(msgs[k], ref, answers, scores, test=name == "test", min_gap=req.min_gap)
                if made is not None:
                    lines.append(json.dumps(made, ensure_ascii=False) + "\n")
                    prog["pairs"] += bool(made["chosen"])
            with open(path, "ab") as f:
                f.write("".join(lines).encode())
                f.flush()
                os.fsync(f.fileno())
                prog["bytes"] = f.tell()
            prog["done"], prog["rows"] = start + len(rows), prog["rows"] + len(lines)
            _save(out, manifest)  # after the rows it counts are on disk
            if on_progress:
                on_progress(sum(manifest["splits"][n]["done"] for n in splits) - done_before, total - done_before)
    manifest["complete"] = True
    _save(out, manifest)
    return manifest
