"""`qlora-app export`: a run's adapter as a folder people can use elsewhere, with its model card.

Formats: ``adapter`` (the PEFT folder), ``merged`` (the adapter merged into a 16-bit copy of the base, never into
the 4-bit one: that would bake rounding error into every layer; by default onto the weights the adapter was trained
on, the NF4 base dequantized, so the merged model answers as the adapter the proof measured: app.model.pair
.merged_model's ``onto``), ``gguf`` (the merged model converted by llama.cpp's
converter: one .gguf file, plus the vision projector's for a vision-language model), ``gguf-lora`` (the adapter
alone in llama.cpp's LoRA format, for the base's own GGUF: app/export/lora_gguf.py) and ``ollama`` (the GGUF plus
a Modelfile). A base model alone as a GGUF (the file a gguf-lora adapter loads beside): base_gguf.py.

Everything is written into a hidden staging folder beside DIR and moved into DIR at the end, so a crash or a full
disk leaves nothing under DIR's final names. At most one 16-bit copy of the model is in memory: the merge frees it
before the converter streams the saved tensors one by one.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import UserError, write_failure
from app.export import gguf as gguf_mod
from app.export import lora_gguf
from app.export import measure
from app.export import quantize as quant
from app.export.card import write_card
from app.export.mtp import keep_mtp, mtp_layers
from app.export.template import derive, go_template, stop_strings
from app.host.machine import torch_dtype
from app.model.load import load_tokenizer
from app.model.pair import MERGE_ONTO, find_target, merged_model
from app.model.source import model_folder
from app.model.vision import load_processor
from app.run import layout, lookup
from app.run.record import record_export

FORMATS = ("adapter", "merged", "gguf", "gguf-lora", "ollama")
MEASURED = ("merged", "gguf", "ollama")  # the formats that hold the merged model: each measured on the proof's rows
MERGE_DTYPES = ("bf16", "fp16", "fp32")
MODELFILE = "Modelfile"
SENTENCEPIECE = "tokenizer.model"  # a SentencePiece model, as the hub ships it beside tokenizer.json
_MERGED_TMP = ".merged"


@dataclass
class Exported:
    out: Path
    fmt: str
    files: dict[str, str] = field(default_factory=dict)  # role (gguf, modelfile, card) -> file name in out
    notes: list[str] = field(default_factory=list)
    ollama_command: str | None = None
    measured: list = field(default_factory=list)  # app.export.measure.Measured of each artifact, on the proof's rows
    failed: str | None = None  # a quantization that failed: raised once what was made (the f16 file) is in out


def check_out(out: Path, force: bool) -> None:
    """DIR may be new or empty; a non-empty one only with --force (files of the same name are then replaced)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"'{out}' is a file; pass a folder for --out")
    blocked = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise UserError(f"--out '{out}' cannot be made: '{blocked}' is a file; pass a folder path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"'{out}' is not empty (an earlier export?); add --force to replace what this export writes "
                        "there, or pass a new or empty --out folder")


def slug(name: str) -> str:
    """A name Ollama and file systems accept: lower case letters, digits, '-', '_' and '.'."""
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "model"


def default_out(adapter_dir: Path, run_dir: Path | None, fmt: str) -> Path:
    """Where an export goes without --out: beside what it was made from, RUN/exports/<format> (an adapter folder
    outside a run: <adapter>-<format> beside it)."""
    if run_dir is not None:
        return run_dir / layout.EXPORTS / fmt
    return adapter_dir.parent / f"{adapter_dir.name}-{fmt}"


def export_run(run, out, fmt: str = "adapter", outtype: str | None = None, dtype: str | None = None,
               force: bool = False, local_only: bool = False, onto: str = "trained",
               measure_rows: int | None = None) -> Exported:
    """``outtype``: the GGUF types to write (gguf / ollama), one or several comma-separated (app/export/quantize.py;
    default q4_k_m), or the adapter GGUF's one type (gguf-lora; default f16). ``onto``: what a merge merges onto
    (app.model.pair.MERGE_ONTO). ``measure_rows``: the proof's held-out rows each merged artifact is asked again
    (None: all of them; 0: none; app/export/measure.py)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt} is not one of {', '.join(FORMATS)}")
    if onto not in MERGE_ONTO:
        raise UserError(f"--merge-onto {onto} is not one of {', '.join(MERGE_ONTO)}; trained (the default) merges "
                        "onto the weights the adapter was trained on")
    outtypes = quant.parse_outtypes(outtype or (lora_gguf.DEFAULT if fmt == "gguf-lora" else quant.DEFAULT))
    if dtype is not None and dtype not in MERGE_DTYPES:
        raise UserError(f"--dtype {dtype} is not one of {', '.join(MERGE_DTYPES)}; pick one (bf16 is the default)")
    target = find_target(run)
    adapter_dir, run_cfg, mc = target.adapter_dir, target.run_cfg, target.base
    run_dir = lookup.run_of_adapter(adapter_dir)
    out = Path(out) if out is not None else default_out(adapter_dir, run_dir, fmt)
    check_out(out, force)
    if fmt in ("gguf", "ollama", "gguf-lora"):
        gguf_mod.converter()  # the extra is missing: one line before anything loads
        quant.check_quantizer(outtypes)
    if fmt == "gguf-lora":
        lora_gguf.check_type(outtypes)
        if mc.images:
            raise UserError("an adapter GGUF of a run on pictures is not made (llama.cpp reads pictures through the "
                            "base's projector file, which this adapter's language side would have to match); export "
                            "--format gguf for the merged model and its projector")
    result = Exported(out=out, fmt=fmt)
    published(result, lambda stage: _build(stage, result, adapter_dir, run_dir, run_cfg, mc.name_or_path, fmt,
                                             outtypes, dtype, local_only, images=bool(mc.images), onto=onto))
    if fmt in MEASURED and measure_rows != 0:
        _measure(result, adapter_dir, run_dir, run_cfg, mc.name_or_path, local_only, measure_rows)
    return result


def _measure(result: Exported, adapter_dir: Path, run_dir, run_cfg, base: str, local_only: bool,
             limit: int | None) -> None:
    """Each artifact ``result`` wrote that holds the merged model (the folder; each GGUF), asked the proof's rows:
    said in the export's notes, added to its card, recorded in the run's status.json (``exports``)."""
    rows, why = measure.proof_rows(run_dir, run_cfg, local_only, limit)
    if rows is None:
        result.notes.append(f"not measured: {why}")
        return
    try:
        if result.fmt == "merged":
            found = [measure.measure_folder(result.out, rows)]
        else:
            tok = load_tokenizer(run_cfg.model.model_copy(update={"name_or_path": base}), local_only)
            found = [measure.measure_gguf(result.out / name, tok, rows) for role, name in result.files.items()
                     if role == "gguf" or (role.startswith("gguf-") and name.endswith(".gguf"))]
    except UserError as e:  # llama.cpp died answering (an illegal instruction, memory): the export stands, unmeasured
        result.notes.append(f"not measured: {e}")
        return
    result.measured = found
    result.notes += [m.line() for m in found]
    card = result.out / "README.md"
    if card.is_file():
        card.write_text(card.read_text().rstrip("\n") + "\n\n" + measure.card_section(found) + "\n")
    if run_dir is not None:
        record_export(run_dir, result.fmt, str(result.out), [m.record() for m in found])



def published(result: Exported, build) -> Exported:
    """``build(stage)`` into a hidden staging folder beside ``result.out``, then moved under the final names: a crash
    or a full disk leaves none of them half-written."""
    out = result.out
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        build(staging)
        _umask_modes(staging)
        out.mkdir(exist_ok=True)
        for entry in sorted(staging.iterdir()):
            target = out / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry, target)
    except Exception as e:
        # safetensors and the GGUF writer report a full disk in their own exception types
        failed = write_failure(e)
        if failed is not None and failed.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(f"the disk filled up while exporting to '{out}'; free some space and run the export "
                            "again (no partial file was left under the final names)") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if result.failed:
        raise UserError(result.failed)
    return result


def _build(stage: Path, result: Exported, adapter_dir, run_dir, run_cfg, base: str, fmt, outtypes, dtype, local_only,
           images: bool = False, onto: str = "trained"):
    name = slug(run_dir.name if run_dir else adapter_dir.name)
    if fmt == "adapter":
        shutil.copytree(adapter_dir, stage, dirs_exist_ok=True)
    elif fmt == "merged":
        merge(adapter_dir, base, stage, dtype or "bf16", local_only, images=images, onto=onto)
    elif fmt == "gguf-lora":
        path = stage / f"{name}-lora-{outtypes[0]}.gguf"
        pairs = lora_gguf.convert_adapter(adapter_dir, base, path, outtypes[0], name, local_only)
        result.files["gguf-lora"] = path.name
        result.notes.append(f"{path.name}: {path.stat().st_size / 1e6:,.1f} MB, {len(pairs.ab)} LoRA pairs; load it "
                            f"beside a GGUF of the same base ({base}): llama-server -m BASE.gguf --lora {path.name}"
                            f" (the base's GGUF: qlora-app export --base {base} --format gguf --outtype f16)"
                            + ("; its scale (rsLoRA or a per-module alpha) is written into the B matrices, so "
                               "llama.cpp applies it at --lora's scale 1" if pairs.baked else ""))
    else:
        merged = stage / _MERGED_TMP
        tok = save_tokenizer(adapter_dir, base, merged, local_only)
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(base, local_files_only=local_only)
        arch = gguf_mod.check_architecture(config, images=images)
        pre = gguf_mod.pre_tokenizer(merged)  # refused here, before minutes of merging
        # the converter's types from the merge; the quantizer's from the converter's f16 file
        converted = _converted(outtypes)
        merge_dtype = dtype or gguf_mod.merge_dtype(config, "f32" if "f32" in converted else converted[0])
        merge(adapter_dir, base, merged, merge_dtype, local_only, tokenizer=False, images=images, onto=onto)
        if mtp_layers(config):  # drafting layers transformers never loads: the base's, where the converter reads them
            result.notes.append(keep_mtp(model_folder(base, local_only=True), merged, config, torch_dtype(merge_dtype),
                                         arch))
        if images:  # llama.cpp reads pictures through a second file: the vision tower and projector (--mmproj)
            save_processor(base, tok, merged, local_only)  # the converter reads its image size, mean and tokens
            kind = gguf_mod.projector_outtype(outtypes[0])
            projector = stage / f"mmproj-{name}-{kind}.gguf"
            gguf_mod.convert(merged, projector, kind, None, name, projector=True)
            result.files["mmproj"] = projector.name
        write_ggufs(merged, stage, name, outtypes, tok, pre, result)
        gguf_file = stage / result.files["gguf"]
        if run_cfg and run_cfg.tools.enabled:
            result.notes.append("the model calls tools in its chat template's format, embedded in the GGUF (llama.cpp: "
                                "llama-server --jinja parses the calls); the tools are not in the model: the program "
                                "that serves it runs them and sends their results back")
        if fmt == "ollama":
            system = run_cfg.data.system_prompt if run_cfg else None
            text, notes = modelfile(tok, gguf_file.name, system, merged, tools=bool(run_cfg and run_cfg.tools.enabled),
                                    projector=result.files.get("mmproj"))
            (stage / MODELFILE).write_text(text)
            result.files["modelfile"] = MODELFILE
            result.notes += notes
            result.ollama_command = f"ollama create {name} -f {result.out / MODELFILE}"
        shutil.rmtree(merged)
    (stage / "README.md").unlink(missing_ok=True)  # PEFT's blank card; ours replaces it
    write_card(stage, run_dir, run_cfg, fmt, base, result.files, ollama_name=name, adapter_dir=adapter_dir, onto=onto)
    if fmt in ("adapter", "merged"):  # the weights written, named in what the export reports (not the card alone)
        weights = sorted(p.name for p in stage.iterdir() if p.suffix in (".safetensors", ".bin"))
        result.files.update({"weights" if i == 0 else f"weights-{i}": w for i, w in enumerate(weights)})
    result.files["card"] = "README.md"


def _converted(outtypes: list[str]) -> list[str]:
    """The types the converter writes: those asked that it makes, and f16 for the quantizer to start from."""
    converted = [t for t in outtypes if t in quant.CONVERTER_TYPES]
    if quant.needs_quantizer(outtypes) and quant.SOURCE not in converted:
        converted.append(quant.SOURCE)
    return converted


def write_ggufs(model_dir: Path, stage: Path, name: str, outtypes: list[str], tok, pre, result: Exported) -> list:
    """``model_dir`` (16-bit weights, its tokenizer declared as ``pre``) as GGUF files in ``stage``: the converter's
    types straight, the k-quants by llama.cpp's quantizer from its f16 file; the first file's tokenizer checked
    against ``tok``. Returns the types made (result.files: gguf, gguf-TYPE)."""
    converted = _converted(outtypes)
    files = {t: stage / f"{name}-{t}.gguf" for t in [*converted, *outtypes]}
    for t in converted:
        gguf_mod.convert(model_dir, files[t], t, pre, name)
    problem = gguf_mod.verify_tokenizer(files[converted[0]], tok)
    if problem:
        raise UserError(f"the GGUF's tokenizer splits text differently from the model ({problem}); nothing was "
                        "written; export --format merged instead")
    made = _quantize(files, outtypes, result)
    for t in made:
        result.files["gguf" if t == made[0] else f"gguf-{t}"] = files[t].name
    return made


def _quantize(files: dict[str, Path], outtypes: list[str], result: Exported) -> list[str]:
    """Quantize each asked type the converter does not write from the f16 file, saying each file's size and how many
    weight matrices fell back from a k-quant; the types made, in the order asked. A failed quantization keeps the
    f16 file (made first, in its place) and is reported once the export is in place (``result.failed``)."""
    made = []
    for t in outtypes:
        fell = 0
        if t not in quant.CONVERTER_TYPES:
            try:
                fell = quant.quantize(files[quant.SOURCE], files[t], t)
            except UserError as e:
                result.failed = str(e)
                return list(dict.fromkeys([quant.SOURCE, *made]))
        made.append(t)
        types = quant.tensor_types(files[t])
        result.notes.append(f"{files[t].name}: {files[t].stat().st_size / 1e6:,.1f} MB, {sum(types.values())} weight "
                            f"matrices ({', '.join(f'{n} {k}' for k, n in types.most_common())})"
                            + (f"; {fell} tensor(s) fell back from {t} to the type llama.cpp picks (rows not a "
                               "multiple of its block)" if fell else ""))
    if quant.needs_quantizer(outtypes) and quant.SOURCE not in outtypes:
        files[quant.SOURCE].unlink(missing_ok=True)  # only the quantizer's input
    return made


def save_tokenizer(adapter_dir: Path, base: str, dest: Path, local_only: bool):
    """The run's tokenizer (saved beside the adapter when training changed it), else the base's."""
    from transformers import AutoTokenizer

    src = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base
    tok = AutoTokenizer.from_pretrained(src, local_files_only=local_only)
    tok.save_pretrained(dest)
    keep_hub_tokenizer(base, dest, local_only)
    return tok


def keep_hub_tokenizer(base: str, dest: Path, local_only: bool) -> None:
    """The tokenizer files in ``dest`` as the base publishes them, where llama.cpp's converter reads them and
    transformers 5 writes them otherwise: tokenizer_config.json names the base's class (transformers writes the class
    it loaded: TokenizersBackend for Phi-4's GPT2Tokenizer, whose converter then looks for a SentencePiece file), and
    the base's SentencePiece model (tokenizer.model: Gemma 3, Llama 2, Mistral), which transformers 5 does not save,
    is copied (without it the converter reads Gemma 3's tokenizer.json as a BPE it does not know)."""
    from transformers.utils import cached_file

    def base_file(name: str) -> Path | None:
        found = cached_file(str(base), name, local_files_only=local_only, _raise_exceptions_for_missing_entries=False)
        return Path(found) if found else None

    config = base_file("tokenizer_config.json")
    named = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class") if config else None
    path = dest / "tokenizer_config.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    if named and saved.get("tokenizer_class") != named:
        path.write_text(json.dumps({**saved, "tokenizer_class": named}, indent=2, ensure_ascii=False), encoding="utf-8")
    model = None if (dest / SENTENCEPIECE).is_file() else base_file(SENTENCEPIECE)
    if model is not None:
        shutil.copyfile(model, dest / SENTENCEPIECE)


def merge(adapter_dir: Path, base: str, dest: Path, dtype: str, local_only: bool, tokenizer: bool = True,
          images: bool = False, onto: str = "trained") -> None:
    """The adapter merged into a ``dtype`` copy of the base (``onto``: app.model.pair.MERGE_ONTO), saved in
    ``dest``; the model is freed on return. ``images``: a vision-language model, merged whole (its vision side as it
    was) and saved with its processor."""
    model = merged_model(adapter_dir, base, torch_dtype(dtype), local_only, images=images, onto=onto)
    model.save_pretrained(dest)
    del model
    gc.collect()
    if tokenizer:
        tok = save_tokenizer(adapter_dir, base, dest, local_only)
        if images:
            save_processor(base, tok, dest, local_only)


def save_processor(base: str, tok, dest: Path, local_only: bool) -> None:
    """The base's processor around the run's tokenizer, saved in ``dest`` (a vision-language model's image side)."""
    processor = load_processor(base, local_only=local_only)
    processor.tokenizer = tok
    processor.save_pretrained(dest)


def modelfile(tok, gguf_name: str, system: str | None, model_dir: Path, tools: bool = False,
              projector: str | None = None) -> tuple[str, list[str]]:
    """Ollama's Modelfile: FROM, a TEMPLATE derived from the chat template, SYSTEM, a stop for each end of turn.
    ``tools``: a tool run's model, whose TEMPLATE is left to Ollama (a derived one has turns only, no tool format).
    ``projector``: a vision-language model's projector file, a second FROM (how Ollama imports one)."""
    notes = []
    fmt = derive(tok)
    lines = [f"FROM ./{gguf_name}"] + ([f"FROM ./{projector}"] if projector else []) + [""]
    if projector:
        notes.append("the Modelfile names the vision projector in a second FROM line, as Ollama imports one; Ollama "
                     "is not installed where qlora-app is tested, and its import of a separate projector has had "
                     "bugs (ollama #9967, #17491): llama.cpp (llama-server --mmproj) is the checked path")
    if tools:
        notes.append("a tool run: the Modelfile has no TEMPLATE, so Ollama reads the chat template embedded in the "
                     "GGUF and, for a family it knows (Qwen 2.5 / 3, Llama 3.1 / 3.2, ...), renders the request's "
                     "tools and parses the model's calls with its own; a derived TEMPLATE would carry turns only")
        system = system or (fmt.default_system if fmt else None)
    elif fmt is not None:
        adds_bos = bool(tok.bos_token) and tok("x")["input_ids"][:1] == [tok.bos_token_id]
        lines += [f'TEMPLATE """{go_template(fmt, tok.bos_token if adds_bos else None)}"""', ""]
        system = system or fmt.default_system
    elif not getattr(tok, "chat_template", None):
        notes.append("the model has no chat template, so the Modelfile has no TEMPLATE: Ollama sends prompts as "
                     "they are typed")
    else:
        notes.append("the chat template is not a plain sequence of turns, so the Modelfile has no TEMPLATE; Ollama "
                     "reads the one embedded in the GGUF")
    if system:
        lines += [f'SYSTEM """{system}"""', ""]
    try:
        gen_eos = json.loads((model_dir / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError):
        gen_eos = None
    eos_ids = gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else []
    for s in stop_strings(tok, fmt, eos_ids):
        lines.append(f"PARAMETER stop {json.dumps(s)}")
    return "\n".join(lines) + "\n", notes


def _umask_modes(folder: Path) -> None:
    """Libraries write through a private temporary file renamed into place (mode 0600); exported files are for
    other tools and people, so they get the mode the user's umask gives a new file (0644 for the usual 022)."""
    umask = os.umask(0)
    os.umask(umask)
    for p in [Path(folder), *Path(folder).rglob("*")]:
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)
