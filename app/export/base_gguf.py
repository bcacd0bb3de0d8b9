"""`qlora-app export --base MODEL --format gguf`: a base model alone as a GGUF, the file a `--format gguf-lora`
adapter loads beside (``llama-server -m BASE.gguf --lora ADAPTER.gguf``); the gguf-lora export names this command.
Any model llama.cpp's converter takes: a folder, a hub id (in the cache, or downloaded unless --local-only), a shipped
model by its name (its tokenizer declared to the converter as a run's export declares it). Written as a run's GGUF
export writes its merged model (bundle.write_ggufs) and published the same way (bundle.published).

Owns: exporting a base (its folder: app/model/source.model_folder). Must not merge (bundle.py).
"""

from __future__ import annotations

from pathlib import Path

from app.export import gguf as gguf_mod
from app.export import quantize as quant
from app.export.bundle import Exported, check_out, published, slug, write_ggufs
from app.model.source import model_folder


def export_base(base: str, out, outtype: str | None = None, force: bool = False, local_only: bool = False) -> Exported:
    """A GGUF of a base model alone (``qlora-app export --base MODEL --format gguf``): the file an adapter GGUF
    (--format gguf-lora) loads beside, for any model the converter takes, the shipped ones included (their tokenizer
    declared as app/export/gguf.pre_tokenizer declares it). ``outtype``: as a run's GGUF export (default q4_k_m)."""
    outtypes = quant.parse_outtypes(outtype or quant.DEFAULT)
    gguf_mod.converter()  # the extra is missing: one line before anything is read
    quant.check_quantizer(outtypes)
    folder = model_folder(base, local_only)
    name = slug(folder.name if folder.name != "snapshots" else base)
    out = Path(out) if out is not None else Path("exports") / f"{name}-gguf"
    check_out(out, force)
    result = Exported(out=out, fmt="gguf")

    def build(stage: Path) -> None:
        from transformers import AutoConfig, AutoTokenizer  # heavy

        config = AutoConfig.from_pretrained(folder)
        gguf_mod.check_architecture(config)
        tok = AutoTokenizer.from_pretrained(folder)
        write_ggufs(folder, stage, name, outtypes, tok, gguf_mod.pre_tokenizer(folder), result)
        written = ", ".join(f"`{f}`" for f in result.files.values())
        (stage / "README.md").write_text(
            f"# {name} (GGUF)\n\nThe base model `{base}` as {written}, written by llama.cpp's converter (and its "
            "quantizer for the k-quants) with `qlora-app export --base`. Load an adapter GGUF of a run on this base "
            f"beside it (`qlora-app export RUN --format gguf-lora`): `llama-server -m {result.files['gguf']} --lora "
            "ADAPTER.gguf`.\n")
        result.files["card"] = "README.md"

    return published(result, build)
