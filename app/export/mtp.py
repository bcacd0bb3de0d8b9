"""Multi-token-prediction (next-n) layers in a GGUF export. Qwen3.5 / 3.6 (``mtp.*``), Qwen3-Next, GLM-4.5+ and
DeepSeek V3 (``model.layers.N.*`` past ``num_hidden_layers``) ship layers that draft the next tokens, which llama.cpp
uses for speculative decoding. transformers loads none of them, so a merged folder has none; LoRA never touches
them, so the base's are the merged model's. Where llama.cpp's converter writes them for the architecture (its class's
``supports_mtp_export``), the export copies them from the base's files, unchanged, into the merged folder
(``model-mtp.safetensors``: a file the converter reads beside the merge's and transformers ignores), and the GGUF
carries them; elsewhere the export says what it leaves out and why.

Owns: finding a checkpoint's MTP tensors, copying them, the export's line about them. Must not merge nor convert
(bundle.py, gguf.py).
"""

from __future__ import annotations

import re
from pathlib import Path

MTP_FILE = "model-mtp.safetensors"
_NAMED = re.compile(r"(^|\.)mtp\.")  # Qwen3.5 / 3.6 / Next: mtp.fc, mtp.layers.0, ...
_LAYER = re.compile(r"^(?:model\.)?(?:language_model\.)?layers\.(\d+)\.")  # the language model's decoder layers


def mtp_layers(config) -> int:
    """The multi-token-prediction (next-n) layers a base's config counts (Qwen3.5 / 3.6's ``mtp_num_hidden_layers``,
    GLM-4.5's and DeepSeek V3's ``num_nextn_predict_layers``), 0 where it has none."""
    return max(int(_get(c, key) or 0) for c in (config, _text(config))
               for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"))


def _text(config):
    """The language model's config: a transformers config's or config.json's (a dict) text_config, else itself."""
    return (config.get("text_config") or config) if isinstance(config, dict) else config.get_text_config()


def _get(c, key):
    return c.get(key) if isinstance(c, dict) else getattr(c, key, None)


def mtp_tensors(folder: Path, config) -> dict[str, str]:
    """{tensor name: file} of the MTP tensors in a checkpoint folder's safetensors (read from their headers):
    ``mtp.*`` names, or decoder layers numbered past the config's ``num_hidden_layers``. Empty where the config counts
    none."""
    if not mtp_layers(config):
        return {}
    from safetensors import safe_open  # heavy

    main = int(_get(_text(config), "num_hidden_layers") or 0)
    found = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                layer = _LAYER.match(name)
                if _NAMED.search(name) or (layer and int(layer.group(1)) >= main):
                    found[name] = f.name
    return found


def carry(base_folder: Path, merged: Path, config, dtype) -> int:
    """The base's MTP tensors copied unchanged (at ``dtype``, a torch dtype: the merge's) into ``merged`` as
    MTP_FILE; returns how many tensors (0: the base's files hold none)."""
    found = mtp_tensors(base_folder, config)
    if not found:
        return 0
    from safetensors import safe_open  # heavy
    from safetensors.torch import save_file

    tensors = {}
    for file in sorted(set(found.values())):
        with safe_open(str(Path(base_folder) / file), "pt") as st:
            tensors.update({name: st.get_tensor(name).to(dtype) for name in found if found[name] == file})
    save_file(tensors, str(merged / MTP_FILE), metadata={"format": "pt"})
    return len(tensors)


def converter_writes_mtp(cls) -> bool:
    """Whether llama.cpp's converter class writes an architecture's MTP layers into its GGUF."""
    return bool(getattr(cls, "supports_mtp_export", False))


def keep_mtp(base_folder: Path, merged: Path, config, dtype, arch: str) -> str | None:
    """A GGUF export's MTP layers: copied from the base into ``merged`` where llama.cpp's converter writes them for
    architecture ``arch``; the line the export says about them (None: the base has none)."""
    n = mtp_layers(config)
    if not n:
        return None
    from conversion import get_model_class  # heavy: llama.cpp's converter

    cls = get_model_class(arch)
    if not converter_writes_mtp(cls):
        return (f"the base's {n} multi-token-prediction layer(s) are not in this GGUF: llama.cpp's converter "
                f"writes none for {cls.__name__}; the GGUF generates token by token as usual")
    copied = carry(base_folder, merged, config, dtype)
    if not copied:
        return (f"the base's config counts {n} multi-token-prediction layer(s) but its files hold none: the GGUF has "
                "none and generates token by token as usual")
    return (f"the base's {n} multi-token-prediction layer(s) ({copied} tensors, unchanged: LoRA does not train them) "
            "are in this GGUF, for llama.cpp's speculative decoding")
