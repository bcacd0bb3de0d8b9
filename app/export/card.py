"""The model card every export writes (DIR/README.md through huggingface_hub's ModelCard): what it is, how it was
trained, the held-out base-vs-adapter numbers from the run's latest comparison, its curves, and how to run it.
PEFT's own card ("[More Information Needed]", a local base path) is replaced by this one."""

from __future__ import annotations

import shutil
from pathlib import Path

from app import proof, rundir

LIBRARY = {"adapter": "peft", "merged": "transformers", "gguf": "gguf", "ollama": "gguf"}


def _pct(x) -> str:
    return "–" if x is None else f"{x:.1%}"


def _num(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _hub_id(name: str | None) -> str | None:
    """A base given as a hub id stays; a local folder is not a hub id and must not go into base_model."""
    if not name or Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        return None
    return name


def proof_table(cmp: dict | None) -> list[str]:
    """Markdown lines of the held-out comparison, or a line saying there is none yet."""
    if not cmp:
        return ["No comparison recorded yet: run `qlora-app compare --adapter RUN --num-samples 100` before exporting "
                "to put the held-out numbers here."]
    s, c = cmp["summary"], cmp.get("config") or {}
    how = (f"{s['n']} rows of `{c.get('dataset')}` the adapter never trained on" if c.get("dataset")
           else f"{s['n']} prompts")
    decoding = "greedy" if c.get("greedy", True) else f"temperature {c.get('temperature')}"
    lines = [f"Base vs adapter on {how} ({decoding}, up to {c.get('max_new_tokens')} new tokens, the run's "
             "system prompt and chat template), scored with the run's shaped reward:", "",
             "| | accuracy | mean reward | mean tokens |", "|---|---:|---:|---:|"]
    for side in ("base", "adapter"):
        x = s[side]
        lines.append(f"| {side} | {_pct(x.get('accuracy'))} | {_num(x.get('mean_reward'))} | "
                     f"{_num(x.get('mean_tokens'))} |")
    lines += ["", f"Adapter vs base per row: {s['wins']} wins, {s['ties']} ties, {s['losses']} losses (n = {s['n']})."]
    return lines


def _comparison_of(run: Path | None, adapter_dir: Path | None) -> dict | None:
    """The run's latest comparison, when it compared this very adapter (a checkpoint's export must not carry the
    final adapter's numbers)."""
    cmp = proof.latest_comparison(run) if run else None
    if not cmp or adapter_dir is None:
        return cmp
    compared = (cmp.get("config") or {}).get("adapter")
    return cmp if compared and Path(compared).resolve() == Path(adapter_dir).resolve() else None


def write_card(out: Path, run: Path | None, cfg, fmt: str, base_model: str, files: dict[str, str],
               ollama_name: str | None = None, adapter_dir: Path | None = None) -> Path:
    """DIR/README.md. ``cfg``: the run's AppConfig (None for a bare adapter folder); ``files``: role -> file name
    in DIR (gguf, modelfile); ``adapter_dir``: the adapter exported (its comparison is the card's proof)."""
    from huggingface_hub import ModelCard, ModelCardData

    method = cfg.method if cfg else None
    tags = ["qlora-app", "qlora", "lora"] + ([method] if method else []) + (["gguf"] if fmt in ("gguf", "ollama")
                                                                           else [])
    dataset = cfg.data.dataset if cfg else None
    data = ModelCardData(base_model=_hub_id(base_model), library_name=LIBRARY[fmt], tags=tags,
                         datasets=[dataset] if _hub_id(dataset) else None, pipeline_tag="text-generation")
    name = run.name if run else out.name
    body = [f"# {name}", "",
            f"A LoRA {'adapter' if fmt == 'adapter' else 'fine-tune'} of `{base_model}` trained with "
            f"qlora-app ({(method or 'unknown method').upper()} on a 4-bit base)"
            + (", merged into a 16-bit copy of the base" if fmt == "merged" else "")
            + (f", converted to GGUF for llama.cpp{' and Ollama' if fmt == 'ollama' else ''}"
               if fmt in ("gguf", "ollama") else "") + ".", ""]
    if cfg:
        st = (rundir.read_status(run) or {}) if run else {}
        if adapter_dir is not None and adapter_dir.parent.name == rundir.CHECKPOINTS:  # a checkpoint: its own step
            st = {"step": rundir.checkpoint_step(adapter_dir)}
        lora, tr = cfg.lora, cfg.training
        targets = lora.target_modules if isinstance(lora.target_modules, str) else ", ".join(lora.target_modules)
        weights = ", ".join(f"{k} {v:g}" for k, v in cfg.reward.weights.items())
        body += ["## How it was trained", "",
                 f"- method: {cfg.method.upper()}, {st.get('step', tr.max_steps)} optimizer steps, learning rate "
                 f"{tr.learning_rate}, seed {tr.seed}",
                 f"- LoRA: r {lora.r}, alpha {lora.alpha}, dropout {lora.dropout}, targets {targets}",
                 f"- data: `{dataset}`" + (f" (system prompt: \"{cfg.data.system_prompt}\")"
                                           if cfg.data.system_prompt else "")]
        if cfg.method == "grpo":
            g = cfg.grpo
            body += [f"- GRPO: {g.num_generations} completions per prompt, loss {g.loss_type}, up to "
                     f"{g.max_completion_length} tokens each; reward weights: {weights}"]
        body.append("")
    body += ["## Held-out proof", ""] + proof_table(_comparison_of(run, adapter_dir)) + [""]
    if run and (run / rundir.CURVES).is_file():
        shutil.copyfile(run / rundir.CURVES, out / rundir.CURVES)
        body += [f"![training curves]({rundir.CURVES})", ""]
    body += ["## Use it", ""] + _usage(fmt, base_model, files, ollama_name)
    card = ModelCard("---\n" + data.to_yaml() + "\n---\n\n" + "\n".join(body) + "\n")
    path = out / "README.md"
    card.save(path)
    return path


def _usage(fmt, base_model, files, ollama_name) -> list[str]:
    if fmt == "adapter":
        return ["```python", "from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer",
                "model = AutoPeftModelForCausalLM.from_pretrained(\"THIS_FOLDER\")",
                f"tokenizer = AutoTokenizer.from_pretrained(\"{base_model}\")", "```", "",
                "Or chat with it: `qlora-app chat RUN`."]
    if fmt == "merged":
        return ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
                "model = AutoModelForCausalLM.from_pretrained(\"THIS_FOLDER\")",
                "tokenizer = AutoTokenizer.from_pretrained(\"THIS_FOLDER\")", "```"]
    lines = ["llama.cpp:", "", "```sh", f"llama-cli -m {files['gguf']} -cnv", "```"]
    if "modelfile" in files:
        lines += ["", "Ollama:", "", "```sh", f"ollama create {ollama_name} -f {files['modelfile']}",
                  f"ollama run {ollama_name}", "```"]
    return lines
