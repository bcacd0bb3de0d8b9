"""Build the distillation demo's teacher: ``python -m app.demo.build_teacher --out DIR``.

``qlora-app demo --method distill`` needs a teacher that is clearly better than its student (the demo's arith-base)
on the built-in arithmetic and shares its vocabulary, since distillation matches the two models' next-token
distributions over the same tokens. So the teacher is arith-base's own tokenizer (read from the shipped or built
base, never trained again) on a larger model (6 layers of width 192 against the student's 4 of 128: about 2.5x the
parameters) pretrained on the same corpus recipe (app.demo.build_base) except that its transcripts take the right
operation 95% of the time instead of 30%. It answers in the base's own wording ("... = N. So the answer is N."), so
what the student has to learn from it is the one thing the base gets wrong: which operation the problem asks for.

A teacher trained on the answers themselves is the honest stand-in for "a bigger model that knows the task": it
never saw the test split's questions (the corpus excludes them, as arith-base's does). Everything is seeded; the
shipped copy in ``app/assets/arith-teacher`` was produced by this script with its defaults.
"""

from __future__ import annotations

from pathlib import Path

from app.config.builtin import BUILTIN_MODEL, TEACHER_MODEL, builtin_model_path, cache_dir
from app.demo.build_base import MODEL_SHAPE, PRETRAIN_SEED, build_corpus, encode, pretrain, run_builder
from app.export.gguf import convert, pre_tokenizer
from app.export.quantize import quantize

TEACHER_SEED = PRETRAIN_SEED + 10
RIGHT = 0.95  # the share of transcripts with the right operation (arith-base's: 0.3)
TEACHER_SHAPE = {**MODEL_SHAPE, "hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 6,
                 "num_attention_heads": 6, "num_key_value_heads": 6}


def build(out: Path, steps: int = 1500, batch_size: int = 32, lr: float = 2e-3, n_chats: int = 6000,
          seed: int = TEACHER_SEED, log_every: int = 100) -> Path:
    """Train the teacher on arith-base's tokenizer and save it into ``out``. Returns ``out``."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    student = builtin_model_path(BUILTIN_MODEL)  # app.demo.recipe builds it first where it is not shipped
    tok = AutoTokenizer.from_pretrained(student)
    docs = build_corpus(n_chats=n_chats, seed=seed, right=RIGHT)
    cfg = LlamaConfig(vocab_size=len(tok), tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **TEACHER_SHAPE)
    return pretrain(LlamaForCausalLM, cfg, tok, encode(tok, docs), out, steps=steps, batch_size=batch_size, lr=lr,
                    seed=seed, log_every=log_every)


def main(argv: list[str] | None = None) -> None:
    run_builder(build, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()


def teacher_gguf(teacher_dir: Path, outtype: str = "q4_k_m", out: Path | None = None) -> Path:
    """The demo teacher as a GGUF file (``outtype``, Q4_K_M as a user's exported run ships), written once beside the
    cache of built models (convert to f16 with llama.cpp's converter, quantize with llama.cpp), atomically: the
    distillation demo's teacher outside the training process (``qlora-app demo --method distill --gguf-teacher``).
    ``out``: another file to write (a test's)."""
    import os

    out = Path(out) if out else cache_dir(TEACHER_MODEL).with_name(f"{TEACHER_MODEL}-{outtype}.gguf")
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    f16 = out.with_name(f"{out.stem}.f16.tmp-{os.getpid()}.gguf")
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    try:
        if outtype in ("f16", "bf16", "q8_0", "f32"):  # the converter writes these itself
            convert(Path(teacher_dir), tmp, outtype, pre_tokenizer(Path(teacher_dir)), TEACHER_MODEL)
        else:
            convert(Path(teacher_dir), f16, "f16", pre_tokenizer(Path(teacher_dir)), TEACHER_MODEL)
            quantize(f16, tmp, outtype)
        tmp.rename(out)
    finally:
        f16.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return out
