"""A distillation run's teacher, planned before anything loads: found and checked (app/model/teacher.py), its
vocabulary set against the student's, what the pair shares said, and what it adds to the memory estimate.

Memory (bytes, beside app/train/planning/memory.py's terms for the student): the teacher's weights (4-bit NF4 as
the student's are counted, or 16-bit), resident for the whole run, and its no-grad forward over each micro-batch of
the student's samples (one layer's intermediates at a time and the last hidden states TRL's chunked loss projects
through the teacher's head a chunk at a time). The student samples with the training model itself (TRL's
DistillationTrainer has no merged copy): its KV cache is the generation phase, which never overlaps the backward.

A teacher outside the training process (a .gguf file, an http(s) endpoint: app/teacher/) adds nothing to the
student's memory but the layers a GGUF offloads to the card; the plan says where it runs and what it takes
(``Outside``: the file against this machine's free RAM, its context, its threads), refuses one that cannot fit, and
before the student loads probes it (``probe_outside``): up, log-probabilities returned, the data tokenized as the
student tokenizes it, and its throughput.

Owns ``TeacherPlan`` and its memory terms, and the outside teacher's probe; ``Outside`` (where such a teacher runs and
what it takes) is app/teacher/place.py's. Must not load weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from app.config.method_sections import DISTILL_MODES
from app.config.methods import method_of
from app.errors import UserError
from app.model.files import ModelFiles
from app.model.pair import same_model
from app.model.shape import model_shape
from app.model.teacher import (TeacherSource, causal_problem, find_teacher, teacher_system, vocab_size,
                                vocabulary_problem)
from app.teacher.client import TeacherFailed
from app.teacher.connect import OutsideTeacher
from app.teacher.place import Outside, plan_outside
from app.train.planning.weights import weight_bytes


@dataclass(frozen=True)
class TeacherPlan:
    source: TeacherSource
    keep_rows: int | None = None  # its padded head cut to the student's rows as it loads
    shares_base: bool = False  # a run teacher on the student's own base
    system_prompt: str | None = None  # what the teacher is asked with (app.model.teacher.teacher_system)
    student_system: str | None = None  # the student's, which training rows carry
    system_why: str = ""
    mode: str = "on_policy"  # distill.mode: what the teacher does (DISTILL_MODES)
    outside: "Outside | None" = None  # a teacher outside the training process: where and how it runs

    @property
    def reasks(self) -> bool:
        """Whether the teacher is asked other prompts than the student (another system prompt)."""
        return (self.system_prompt or None) != (self.student_system or None)

    def record(self) -> dict:
        return {**self.source.record(), "head_rows_kept": self.keep_rows, "shares_base": self.shares_base,
                "system_prompt": self.system_prompt, "system_prompt_why": self.system_why,
                **({"where": self.outside.record()} if self.outside else {})}

    def system_line(self) -> str | None:
        """Said when the teacher is asked with another system prompt than the student, else None."""
        if not self.reasks:
            return None
        asked = f"its system prompt {_quoted(self.system_prompt)}" if self.system_prompt else "no system prompt"
        student = _quoted(self.student_system) if self.student_system else "none"
        return (f"the teacher is asked with {asked} ({self.system_why}); the student with {student}: it scores the "
                "student's answers after its own prompt; distill.teacher_system_prompt sets another")

    def line(self) -> str:
        s = self.source
        if self.outside is not None:
            return f"teacher: {self.outside.line()}; {OUTSIDE_MODES[self.mode]}"
        precision = "4-bit" if s.model.load_in_4bit else "16-bit"
        what = (f"run {s.given}: its adapter on {s.model.name_or_path}" if s.adapter_dir else s.model.name_or_path)
        line = f"teacher: {what}, {precision}, inference only; {DISTILL_MODES[self.mode]}"
        if self.keep_rows:
            line += (f"; its head is padded past the shared tokenizer: cut to the student's {self.keep_rows} rows as "
                     "it loads")
        if self.shares_base:
            line += ("; it shares the student's base, loaded twice here (a second copy of the base's weights): TRL's "
                     "trainer runs the teacher as a model of its own")
        return line


def plan_teacher(cfg, student_files, say, offline: bool) -> TeacherPlan | None:
    """The teacher of a distillation run (None for the other methods), checked from its small files: missing, not
    a causal language model, trained on pictures, another vocabulary: one line each (UserError), before any weight
    loads. ``student_files``: the student's (app.model.files.ModelFiles)."""
    if not method_of(cfg).teacher:
        return None
    source = find_teacher(cfg.distill, cfg.model, cfg.runtime.local_only, loads=not offline)
    # a GGUF or an endpoint: where it runs (its vocabulary is checked on the data by the probe, before the student)
    outside = plan_outside(cfg, source) if source.outside else None
    source, keep, shares = (source, None, False) if outside else _in_memory(cfg, source, student_files)
    system, why = teacher_system(cfg.distill, source, cfg.data.system_prompt)
    plan = TeacherPlan(source, keep, shares, system, cfg.data.system_prompt, why, cfg.distill.mode, outside)
    say(plan.line())
    if plan.system_line():
        say(plan.system_line())
    return plan


def _in_memory(cfg, source: TeacherSource, student_files) -> tuple[TeacherSource, int | None, bool]:
    """(the source with its files read, rows kept of its head, shares the student's base) of a teacher loaded beside
    the student, checked from its small files: not a causal language model, another vocabulary: one line each."""
    problem = causal_problem(source)
    if problem:
        raise UserError(problem)
    # the two tokenizers (small files, where on disk) tell another vocabulary from a padded head
    teacher_files = ModelFiles(source.model.name_or_path or "", source.model.revision,
                               source.model.trust_remote_code, source.config)  # its config.json as find_teacher read it
    source = replace(source, files=teacher_files)  # the training load and the proof read them, never again
    student_tok, teacher_tok = student_files.tokenizer_on_disk(cfg.model), teacher_files.tokenizer_on_disk(source.model)
    problem, keep = vocabulary_problem(source, cfg.model.name_or_path, vocab_size(student_files.config), student_tok,
                                       teacher_tok)
    if problem:
        raise UserError(problem)
    return source, keep, bool(source.adapter_dir) and same_model(source.model.name_or_path,
                                                                 cfg.model.name_or_path or "")


def _quoted(text: str, width: int = 60) -> str:
    return repr(text if len(text) <= width else text[:width] + "...")


def teacher_bytes(teacher: TeacherPlan | None, tokens: int, d: int) -> tuple[float, float]:
    """(weights, one no-grad forward over ``tokens``) of the teacher; (0, 0) without one or when its size cannot be
    told."""
    if teacher is None:
        return 0.0, 0.0
    if teacher.outside is not None:  # never in the training process: only the layers a GGUF offloads to the card
        return teacher.outside.card_gb * 2**30, 0.0
    mc = teacher.source.model
    shape, params, _ = model_shape(mc.name_or_path or "", teacher.source.config)
    if shape is None or not params:
        return 0.0, 0.0
    weights = weight_bytes(shape, params, mc.load_in_4bit, mc.double_quant, d)
    forward = tokens * (4 * shape["hidden"] + 3 * shape["intermediate"]) * d + tokens * shape["hidden"] * d
    return weights, forward



OUTSIDE_MODES = {
    "on_policy": "on-policy: the student answers, the teacher scores every token of its answers (its top-k "
                 "log-probabilities, batched each step)",
    "off_policy": "off-policy: the teacher answers each training prompt once, greedily, with its top-k "
                  "log-probabilities (kept in the run folder: teacher-answers.jsonl), and the student learns them",
}


def sample_texts(train_ds, tok, n: int = 8) -> list[str]:
    """The first ``n`` training prompts as the student is asked them (chat-templated text): what the vocabulary
    check tokenizes on both sides."""
    texts = []
    for row in train_ds.select(range(min(n, len(train_ds)))):
        p = row["prompt"]
        texts.append(tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if isinstance(p, list)
                     else str(p))
    return [t for t in texts if t]


def probe_outside(plan: TeacherPlan, train_ds, tok, student_name: str, say, log_file: Path | None = None
                  ) -> TeacherPlan:
    """Before the student loads: the outside teacher started (a GGUF) or reached (an endpoint), a sample of the
    data tokenized by it as by the student (another vocabulary: one line), a few answers scored (no log-probabilities,
    down, too slow: one line) and its throughput measured. Returns the plan with the throughput; said. A plan
    without an outside teacher or without its rows (the data not read) is returned as it is."""
    if plan is None or plan.outside is None or train_ds is None:
        return plan
    texts = sample_texts(train_ds, tok)
    if not texts:
        return plan
    mine = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    try:
        with OutsideTeacher(plan.outside.record(), tok, log_file) as teacher:
            theirs = teacher.client.tokenize(texts)
            for text, a, b in zip(texts, mine, theirs):
                if b[:1] == [tok.bos_token_id] and a[:1] != b[:1]:
                    b = b[1:]  # the server put its BOS before the text: not the text's tokens
                if a != b:
                    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                    raise UserError(
                        f"teacher '{plan.source.given}' tokenizes the data another way than the student "
                        f"'{student_name}' (from token {at} of {text[:60]!r}: {b[at:at + 6]} there, {a[at:at + 6]} "
                        "here): distillation matches the two models' next-token distributions over one vocabulary, "
                        "so pass a teacher of the student's family (its tokenizer)")
            seqs = [ids for ids in mine if len(ids) > 1][:4]
            teacher.client.score(seqs, [1] * len(seqs), plan.outside.top_k)
            speed = teacher.client.tokens_per_second
    except TeacherFailed as e:
        raise UserError(f"{e} (probed before the student loads)") from None
    out = replace(plan, outside=replace(plan.outside, tokens_per_s=speed))
    say(f"teacher probe: the data tokenizes alike on both sides ({len(texts)} prompts); "
        f"{speed:,.0f} tokens/s scored" if speed else "teacher probe: the data tokenizes alike on both sides")
    return out
