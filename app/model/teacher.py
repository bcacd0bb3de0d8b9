"""A distillation run's teacher: which model ``distill.teacher`` names, whether it can teach this student, and
loading it for inference.

A teacher is a model id or folder (loaded 4-bit unless distill.teacher_4bit is false) or a qlora-app run (its
adapter on the base it trained on, opened the way every command opens a run: app/model/pair.py), loaded beside the
student; or one that never enters the training process (``outside``): a ``.gguf`` file (run by llama.cpp in a child
process) or an ``http(s)://…/v1`` OpenAI-compatible endpoint, both asked through app/teacher/. Distillation
matches the two models' next-token distributions over one vocabulary, so a teacher must be a causal language model
whose tokens are the student's. The same tokenizer behind a head padded to another size (Qwen2.5-7B's 152,064 rows
beside 1.5B's 151,936 for one 151,665-token tokenizer) is the same vocabulary: the rows no token has are dropped from
the teacher's head as it loads, so a family's larger model teaches its smaller one. Everything is checked from the
small files before any weight loads, each refusal one line.

Owns finding, checking and loading the teacher. Must not plan memory (app/train/planning/teacher.py) nor train;
torch, transformers and peft are imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from app.config.schema import ModelConfig
from app.errors import UserError
from app.model.load import load_base_model
from app.model.pair import find_target, load_pair
from app.model.shape import read_config
from app.model.source import check_model_source
from app.run import lookup

CAUSAL_CLASS_ENDINGS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


@dataclass(frozen=True)
class TeacherSource:
    """What ``distill.teacher`` names: ``model`` the model to load (a run's base for a run teacher), ``adapter_dir``
    a run teacher's adapter (None: the model alone) and ``config`` its config.json as read here; ``files``: its
    app.model.files.ModelFiles once a plan has read them (loading then parses no config.json again)."""

    given: str
    model: ModelConfig
    adapter_dir: Path | None
    config: dict | None
    trained_system: str | None = None  # a run teacher's data.system_prompt: how it was taught to be asked
    files: Any = field(default=None, compare=False, repr=False)
    outside: str | None = None  # "gguf" or "endpoint": a teacher outside the training process (app/teacher/)

    @property
    def label(self) -> str:
        return f"run {self.given}" if self.adapter_dir else self.given

    def record(self) -> dict:
        if self.outside:
            return {"teacher": self.given, "outside": self.outside}
        return {"teacher": self.given, "model": self.model.name_or_path, "4bit": self.model.load_in_4bit,
                "adapter": str(self.adapter_dir) if self.adapter_dir else None}



def find_teacher(distill, student: ModelConfig, local_only: bool, loads: bool = True) -> TeacherSource:
    """The teacher ``distill`` (the run's DistillSection) names, for ``student`` (the run's ModelConfig). A missing
    teacher, a run without its adapter or trained on pictures, a model not to be had from here: one line each.
    ``loads``: the caller will load it here (a dry run reads its config.json only)."""
    name = distill.teacher
    if not name or not str(name).strip():
        raise UserError("method distill learns from a teacher: pass --teacher MODEL (a model id or folder) or "
                        "--teacher RUN (a qlora-app run, its base with its adapter)")
    kind = distill.outside
    if kind:
        return _outside_teacher(str(name).strip(), kind, student)
    found = lookup.locate(name)
    if lookup.is_run_dir(found) or (found / "adapter_config.json").is_file():
        return _run_teacher(name, found, local_only, loads)
    mc = student.model_copy(update={"name_or_path": name, "load_in_4bit": distill.teacher_4bit, "images": False,
                                    "chat_template": None, "revision": None, "quantize_experts": None})
    hint = (f"run 'qlora-app prefetch --model {name}' on a connected machine, or pass a local model folder or a "
            "qlora-app run as --teacher (arith-teacher: the tiny one shipped for the offline demo)")
    try:
        check_model_source(name, local_only, loads=loads, hint=hint)
    except UserError as e:
        raise UserError(f"teacher: {e}") from None
    return TeacherSource(name, mc, None, read_config(name))


def _outside_teacher(name: str, kind: str, student: ModelConfig) -> TeacherSource:
    """A GGUF file (it must be one: read here from its header) or an endpoint (probed before the student loads:
    app/train/planning/teacher.py)."""
    if kind == "gguf":
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"teacher file '{name}' does not exist; pass a .gguf file (qlora-app export --format gguf "
                            "RUN writes one of any run), an http(s)://host:port/v1 endpoint, a model or a run")
        name = str(path.resolve())
    return TeacherSource(name, student.model_copy(update={"name_or_path": name}), None, None, outside=kind)


def _run_teacher(name: str, found: Path, local_only: bool, loads: bool) -> TeacherSource:
    if lookup.is_run_dir(found) and not lookup.has_adapter(found):
        raise UserError(f"teacher run '{found}' has no adapter (it did not finish); pass a finished run, or one of "
                        f"its checkpoints ({found}/checkpoints/checkpoint-N)")
    target = find_target(found)
    if target.base.images:
        raise UserError(f"teacher run '{found}' was trained on pictures and distillation here is on text; pass a "
                        "teacher trained on text, or train the student with --method sft on the pictures")
    try:
        check_model_source(target.base.name_or_path, local_only, loads=loads)
    except UserError as e:
        raise UserError(f"teacher run '{found}': its base: {e}") from None
    return TeacherSource(name, target.base, target.adapter_dir, read_config(target.base.name_or_path),
                         target.system_prompt)


def teacher_system(distill, source: TeacherSource, student_system: str | None) -> tuple[str | None, str]:
    """(the system prompt the teacher is asked with, why): distill.teacher_system_prompt when set (empty: none);
    else as the teacher was trained: a run teacher's own system prompt, a model teacher the student's. The plan
    decides it once and records it (status.json's teacher); training and the proof read it."""
    set_ = distill.teacher_system_prompt
    if set_ is not None:
        return (set_ or None), "distill.teacher_system_prompt"
    if source.outside:
        return student_system, "the student's (data.system_prompt): a GGUF or endpoint teacher has no training record"
    if source.adapter_dir is not None:
        return source.trained_system, "as its run was trained (its data.system_prompt)"
    return student_system, "the student's (data.system_prompt): a model teacher has no training record"


def _text_config(config: dict | None) -> dict:
    return (config or {}).get("text_config") or config or {}


def vocab_size(config: dict | None) -> int | None:
    v = _text_config(config).get("vocab_size")
    return int(v) if isinstance(v, int) else None


def causal_problem(source: TeacherSource) -> str | None:
    """The line for a teacher that is no causal language model (an encoder, an encoder-decoder, a classifier), by
    its config.json's model_type as transformers maps it; None when it is one, or its config is not on disk."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cfg = source.config
    if not cfg:
        return None
    kind = _text_config(cfg).get("model_type") or cfg.get("model_type")
    archs = cfg.get("architectures") or []
    arch = ", ".join(archs) or kind
    # the class a checkpoint was saved as says what it was trained for (BERT's type has a causal head class too)
    decoder = not archs or any(a.endswith(CAUSAL_CLASS_ENDINGS) for a in archs)
    if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not cfg.get("is_encoder_decoder") and decoder:
        return None
    return (f"teacher '{source.given}' is {arch}, not a causal language model (it writes no next-token "
            "distribution to learn from); pass a decoder model of the student's family, or a qlora-app run")


def same_vocabulary(student_tok, teacher_tok) -> bool:
    """Whether two tokenizers give every text the same ids: the same token -> id table (special tokens included)."""
    return student_tok.get_vocab() == teacher_tok.get_vocab()


def vocabulary_problem(source: TeacherSource, student_name: str, student_vocab: int | None, student_tok,
                       teacher_tok) -> tuple[str | None, int | None]:
    """(refusal, rows to keep of the teacher's head). The two tokenizers (``student_tok``, ``teacher_tok``; None
    where not on disk) decide: other tokens are another vocabulary, whatever the sizes (Llama 2's and Mistral's are
    both 32,000); the same tokens behind heads of other sizes are padding, and the teacher's larger head is cut to
    the student's rows. Without both tokenizers, the head sizes alone."""
    teacher_vocab = vocab_size(source.config)
    if student_tok is not None and teacher_tok is not None:
        if not same_vocabulary(student_tok, teacher_tok):
            return _other_vocabulary(source, student_name, teacher_vocab, student_vocab), None
        if teacher_vocab is None or student_vocab is None or teacher_vocab == student_vocab:
            return None, None
        if teacher_vocab > student_vocab >= len(student_tok):
            return None, student_vocab
        return (f"teacher '{source.given}' has the student's tokenizer but a smaller head ({teacher_vocab} rows "
                f"against the student's {student_vocab}); pass a teacher whose head covers the student's"), None
    if teacher_vocab is None or student_vocab is None or teacher_vocab == student_vocab:
        return None, None
    return _other_vocabulary(source, student_name, teacher_vocab, student_vocab), None


def _other_vocabulary(source: TeacherSource, student_name: str, teacher_vocab, student_vocab) -> str:
    sizes = (f"another vocabulary than the student '{student_name}' (both {teacher_vocab} tokens, not the same ones)"
             if teacher_vocab == student_vocab else
             f"a vocabulary of {teacher_vocab} tokens and the student '{student_name}' {student_vocab}")
    return (f"teacher '{source.given}' has {sizes}: distillation matches the two models' next-token distributions "
            "over one vocabulary, so pass a teacher of the student's family (its tokenizer); a cross-tokenizer "
            "trainer (TRL's experimental GOLD) could take this pair, and qlora-app does not run it")


def load_teacher(source: TeacherSource, where, local_only: bool, keep_rows: int | None = None, device: str = "auto"):
    """The teacher for inference: loaded as ``source`` says on ``where`` (the run's placement; None: placed on
    ``device`` as runtime.device says), a run teacher as every command opens a run (app/model/pair.py: its base
    with its adapter, not trainable), every weight frozen; ``keep_rows``: its head cut to that many rows (a padded
    head: vocabulary_problem)."""
    if source.adapter_dir is not None:
        device = ("cuda" if where.cuda else "cpu") if where is not None else device
        model = load_pair(find_target(source.adapter_dir), local_only, device, files=source.files).model
    else:
        model, _, _ = load_base_model(source.model, local_only=local_only, for_training=False, device=device,
                                      where=where, files=source.files)
    if keep_rows:
        cut_head(model, keep_rows)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


def cut_head(model, rows: int) -> None:
    """The output head (and a tied input embedding) cut to its first ``rows`` rows, the config told the new size:
    the rows past a tokenizer's last id are padding no text reaches."""
    import torch

    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.data[:rows].clone(), requires_grad=False)
    if getattr(head, "bias", None) is not None:
        head.bias = torch.nn.Parameter(head.bias.data[:rows].clone(), requires_grad=False)
    head.out_features = rows
    model.config.get_text_config().vocab_size = rows
