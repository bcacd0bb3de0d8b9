"""The model card of every export and of a run's own adapter folder (README.md through huggingface_hub's ModelCard):
what it is, how it was trained, the held-out base-vs-adapter numbers of the run's proof (app/run/proof.py), its curves,
and how to run it. PEFT's own card ("[More Information Needed]", a local base path) is replaced by this one. A base
given as a local folder is named by the folder's name (a card is published: the user's directory layout is not)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from app.config.methods import method_of
from app.run import benchmarks, integrity, layout, proof, store
from app.run.layout import PREFERENCE_WORDS
from app.run.summary import chosen_line, dataset_lines, early_stop_text, lift_lines

LIBRARY = {"adapter": "peft", "merged": "transformers", "gguf": "gguf", "gguf-lora": "gguf", "ollama": "gguf"}


def _pct(x) -> str:
    return "–" if x is None else f"{x:.1%}"


def _num(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _hub_id(name: str | None) -> str | None:
    """A base given as a hub id stays; a local folder is not a hub id and must not go into base_model."""
    if not name or Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        return None
    return name


def _named(name: str, kind: str) -> tuple[str, str | None]:
    """(the name a card shows, what it is when it is local): a hub id or built-in name as it is; a local path by its
    last part, saying it is local (the card may be published: the user's directory layout is not)."""
    p = Path(name).expanduser()
    if not (p.is_absolute() or p.exists() or name.startswith((".", "~"))):
        return name, None
    return p.name, f"a local {kind} {'folder' if p.is_dir() or kind == 'model' else 'file'}"


def code_name(name: str, kind: str = "model") -> str:
    """How a card names a base or a dataset in markdown: the name in a code span, the words about it outside ("`x`
    (a local model folder)")."""
    plain, local = _named(name, kind)
    return f"`{plain}`" + (f" ({local})" if local else "")


def teacher_named(label: str) -> str:
    """The proof's teacher ("run /home/me/runs/x (asked with ...)", a model id or folder) as a card names it: a
    local folder by its last part, as code_name names the base."""
    head, sep, tail = label.partition(" (asked with")
    run = head.startswith("run ")
    return ("run " if run else "") + code_name(head[4:] if run else head, "model") + sep + tail


def proof_table(cmp: dict | None, adhoc: bool = False) -> list[str]:
    """Markdown lines of the held-out comparison, or a line saying there is none yet."""
    if not cmp:
        return ["No held-out comparison of this adapter is recorded: a run writes its proof when training ends; "
                "`qlora-app compare --adapter ADAPTER --num-samples 100` records one for another adapter."]
    s, c = cmp["summary"], cmp.get("config") or {}
    dataset = code_name(c["dataset"], "dataset") if c.get("dataset") else None
    how = (f"{s['n']} held-out rows of {dataset} the adapter never trained on" if dataset
           else f"{s['n']} prompts")
    how += " (an ad-hoc comparison of this adapter)" if adhoc else ""
    decoding = "greedy" if c.get("greedy", True) else f"temperature {c.get('temperature')}"
    lines = [f"Base vs adapter on {how} ({decoding}, up to {c.get('max_new_tokens')} new tokens, the run's "
             "system prompt and chat template), scored with the run's shaped reward:", "",
             "| | accuracy | mean reward | mean tokens |", "|---|---:|---:|---:|"]
    for side in ("base", "adapter", "teacher"):  # a distillation run's proof has its teacher's row too
        x = s.get(side)
        if x is None:
            continue
        tokens = x.get("mean_tokens")
        lines.append(f"| {side} | {_pct(x.get('accuracy'))} | {_num(x.get('mean_reward'))} | "
                     f"{'–' if tokens is None else f'{tokens:.1f}'} |")
    if s["adapter"].get("tool_success") is not None:
        lines += ["", f"Answers whose tool calls all succeeded: base {_pct(s['base'].get('tool_success'))}, adapter "
                      f"{_pct(s['adapter'].get('tool_success'))} (calls per answer {_num(s['base'].get('tool_calls'))} "
                      f"-> {_num(s['adapter'].get('tool_calls'))})."]
    if s.get("correct_when"):
        lines += ["", f"An answer counts as right by the reference match {s['correct_when']}."]
    leaks = c.get("leaks") or {}
    if leaks.get("leaked"):  # held-out rows that repeat training rows: measured on the rest (app/data/leaks.py)
        lines += ["", f"{leaks['leaked']} of the {leaks['heldout']} held-out rows repeat a training row "
                      f"({leaks['exact']} exactly once case, spacing, punctuation and numbers are set aside, "
                      f"{leaks['near']} nearly) and are left out of these figures."]
    if chosen_line(c):  # an adapter picked as the best held-out point: measured on rows that did not pick it
        lines += ["", chosen_line(c)[0].upper() + chosen_line(c)[1:] + "."]
    lines += ["", f"Adapter vs base per row: {s['wins']} wins, {s['ties']} ties, {s['losses']} losses (n = {s['n']})."]
    said = lift_lines(s.get("lift"))  # how sure the lift is: its interval, McNemar's test (app/eval/uncertainty.py)
    lines += ["", "How sure the lift is (95% paired bootstrap interval over the rows; McNemar's exact test for the "
                  "accuracy):", ""] + [f"- {line}" for line in said] if said else []
    if s.get("teacher"):
        closed = s.get("closed")
        lines += ["", f"Teacher: {teacher_named(c.get('teacher') or '')}; the adapter closed "
                      + (f"{closed:.0%} of its lead over the base." if closed is not None else
                         "nothing: the teacher did not lead the base on these rows.")]
    if s.get("by_dataset"):  # a mix: the held-out rows of every dataset on their own
        lines += ["", "Per dataset of the mix:", ""] + [f"- {line}" for line in dataset_lines(s)]
    p = cmp.get("preference")
    if p:  # preference data, in the words of app.run.layout.PREFERENCE_WORDS
        f = proof.preference_figures(p)
        lines += ["", f"On {f['n']} held-out preference pairs:", "",
                  f"- preference accuracy: {_pct(f['accuracy'])}, reward margin {f['margin']:+.3g} (beta "
                  f"{f['beta']:g}): " + PREFERENCE_WORDS["preference accuracy"],
                  f"- chosen more likely: base {_pct(f['base_likelier'])}, adapter {_pct(f['adapter_likelier'])}: "
                  + PREFERENCE_WORDS["chosen more likely"]]
    return lines


def _comparison_of(run: Path | None, adapter_dir: Path | None) -> tuple[dict | None, bool]:
    """(comparison, whether it is ad hoc): the run's proof when it compared this very adapter (a checkpoint's export
    must not carry the final adapter's numbers), else the newest ad-hoc comparison of this adapter on held-out rows
    alone (no typed prompts), else none."""
    if run is None:
        return None, False

    def of_this(cmp: dict | None) -> bool:
        compared = ((cmp or {}).get("config") or {}).get("adapter")
        return adapter_dir is None or bool(compared) and Path(compared).resolve() == Path(adapter_dir).resolve()

    cmp = proof.latest_proof(run)
    if cmp and of_this(cmp):
        return cmp, False
    for path in proof.comparisons(run):
        other = json.loads(path.read_text())
        s = other.get("summary") or {}
        if of_this(other) and s.get("heldout", True) and not s.get("prompts"):
            return other, True
    return None, False


def tools_line(cfg) -> str:
    """The card's line on a tool run: which tools, how many rounds, and what a user must give the model again."""
    t = cfg.tools
    names = ", ".join(f"`{Path(e).name if e.endswith('.py') else e}`" for e in t.use)
    env = f"environment `{t.environment.rsplit(':', 1)[-1]}`" if t.environment else ""
    return (f"- tools: {', '.join(x for x in (names, env) if x)}; up to {cfg.grpo.max_tool_calls} round(s) of calls "
            f"per answer, in the chat template's tool-call format (the model calls them; whoever serves it runs them)")


def images_line(seen: dict) -> str:
    """The card's line on a run trained on images: what the model sees, and what was trained of it."""
    lo, hi = seen.get("per_row") or (1, 1)
    count = f"{lo}" if lo == hi else f"{lo} to {hi}"
    kept = ", ".join(f"`{p}`" for p in seen.get("kept_16bit") or []) or "its vision tower and projector"
    return (f"- images: a vision-language model that sees {count} image(s) per prompt (column "
            f"`{seen.get('column', '?')}`, {seen.get('tokens_per_image', '?')} tokens each); the vision side ({kept}) "
            "was kept 16-bit and not trained, the LoRA adapter is on the language model; ask it with the images "
            "(`qlora-app chat RUN --image PATH`, or an image_url part through `serve`)")


def experts_line(seen: dict) -> str:
    """The card's line on a mixture-of-experts run: which parameters were 4-bit, and whether LoRA is on the experts."""
    total, experts = seen.get("params") or 0, seen.get("expert_params") or 0
    bits = "4-bit (NF4, each quantized as it loaded)" if seen.get("experts_4bit") else "16-bit"
    lora = ("the LoRA adapter is on the experts too (" + ", ".join(f"`{t}`" for t in seen.get("lora_expert_targets")
                                                                   or []) + ")") if seen.get("lora_on_experts") \
        else "the LoRA adapter is on the linear layers, not the experts"
    router = ", ".join(f"{k} {v}" for k, v in (seen.get("router") or {}).items())
    return (f"- mixture of experts: {seen.get('experts', '?')} experts per MoE layer, {experts / 1e6:.2f}M of "
            f"{total / 1e6:.2f}M parameters; the linear layers were 4-bit, the experts {bits}; {lora}"
            + (f"; router: {router}" if router else ""))


def data_words(cfg, st: dict) -> str:
    """'`arith`', or a mix: 'a mix of `arith` 70% (700 rows) and `my.jsonl` 30% (300 rows), drawn without ...'."""
    if not cfg.data.mix:
        return code_name(cfg.data.dataset, 'dataset') if cfg.data.dataset else "`None`"
    drawn = st.get(layout.MIX) or []  # in the order of data.mix
    parts = []
    for i, p in enumerate(cfg.data.mix):
        rows = drawn[i] if i < len(drawn) else {}
        said = (f"{p.share:.0%}" if p.share is not None else "whole") + (
            f", {rows['rows']} of its {rows['available']} rows" + (f" repeated x{rows['repeats']}" if rows.get(
                "repeats") else "") if rows else "")
        parts.append(f"{code_name(p.dataset, 'dataset')} ({said})")
    return (f"a mix of {', '.join(parts)}; each dataset's fields detected on its own, its rows drawn to its share "
            "(seeded, without repeating a row unless data.mix_rows asks for more) and shuffled together, its held-out "
            "rows kept apart")


def method_lines(cfg) -> list[str]:
    """The card's lines of what the run's method did (its own line: app/config/methods/), and the tools it called."""
    line = method_of(cfg).card_line(cfg, code_name)
    return ([line] if line else []) + ([tools_line(cfg)] if cfg.tools.enabled else [])


def write_card(out: Path, run: Path | None, cfg, fmt: str, base_model: str, files: dict[str, str],
               ollama_name: str | None = None, adapter_dir: Path | None = None, onto: str = "trained") -> Path:
    """DIR/README.md. ``cfg``: the run's AppConfig (None for a bare adapter folder); ``files``: role -> file name
    in DIR (gguf, modelfile); ``adapter_dir``: the adapter exported (its comparison is the card's proof)."""
    from huggingface_hub import ModelCard, ModelCardData

    method = cfg.method if cfg else None
    tags = ["qlora-app", "qlora", "lora"] + ([method] if method else []) + (["gguf"] if fmt in ("gguf", "ollama",
                                                                                              "gguf-lora") else [])
    hub_data = [d for d in (cfg.data.datasets if cfg else []) if _hub_id(d)]
    reads_images = bool(cfg and cfg.model.images)
    data = ModelCardData(base_model=_hub_id(base_model), library_name=LIBRARY[fmt], tags=tags,
                         datasets=hub_data or None,
                         pipeline_tag="image-text-to-text" if reads_images else "text-generation")
    name = run.name if run else out.name
    # what a merge was merged onto (app.model.pair.MERGE_ONTO): a 4-bit run's own weights unless asked otherwise
    merged_onto = ("" if not (cfg and cfg.model.load_in_4bit) else
                   " whose layers are the NF4 weights the adapter was trained on, dequantized (so it answers as the "
                   "adapter did)" if onto == "trained" else
                   " with the base's own weights (not the NF4 ones the adapter was trained on: its answers can differ "
                   "from the adapter's)")
    body = [f"# {name}", "",
            f"A LoRA {'adapter' if fmt in ('adapter', 'gguf-lora') else 'fine-tune'} of {code_name(base_model)} "
            "trained with "
            f"qlora-app ({(method or 'unknown method').upper()} on a "
            f"{'16-bit' if cfg and not cfg.model.load_in_4bit else '4-bit'} base)"
            + (f", merged into a 16-bit copy of the base (not 4-bit){merged_onto}" if fmt == "merged" else "")
            + (f": the adapter merged into a 16-bit copy of the base (not 4-bit){merged_onto}, then converted to GGUF "
               "for llama.cpp"
               f"{' and Ollama' if fmt == 'ollama' else ''}" if fmt in ("gguf", "ollama") else "")
            + (": the adapter alone in llama.cpp's LoRA GGUF format, applied over a GGUF of the same base"
               + (" (the base's own weights, not the NF4 ones the adapter was trained against: its answers can differ "
                  "from the adapter's)" if cfg and cfg.model.load_in_4bit else "") if fmt == "gguf-lora" else "")
            + ".", ""]
    if cfg:
        st = (store.read_status(run) or {}) if run else {}
        if adapter_dir is not None and adapter_dir.parent.name == layout.CHECKPOINTS:  # a checkpoint: its own step
            st = {"step": integrity.checkpoint_step(adapter_dir)}
        lora, tr = cfg.lora, cfg.training
        targets = lora.target_modules if isinstance(lora.target_modules, str) else ", ".join(lora.target_modules)
        body += ["## How it was trained", "",
                 f"- method: {cfg.method.upper()}, {st.get('step', tr.max_steps)} optimizer steps, learning rate "
                 f"{tr.learning_rate}, seed {tr.seed}",
                 f"- LoRA: r {lora.r}, alpha {lora.alpha}, dropout {lora.dropout}, targets {targets}",
                 f"- data: {data_words(cfg, st)}"
                 + (f" (system prompt: \"{cfg.data.system_prompt}\")" if cfg.data.system_prompt else "")]
        stopped = early_stop_text(st) if adapter_dir is None or adapter_dir.name == layout.ADAPTER else None
        if stopped:  # the run's adapter may be an earlier step's than the last
            body += [f"- early stopping: {stopped}"]
        if reads_images:
            body += [images_line(st.get(layout.VISION) or {})]
        if st.get(layout.EXPERTS):
            body += [experts_line(st[layout.EXPERTS])]
        linear = (st.get("fast_paths") or "").partition("; linear attention on ")[2]
        if linear:  # Qwen3.5's Gated DeltaNet layers: on the fast kernels or transformers' pure-torch path
            body += [f"- linear-attention layers ran on {linear}"]
        body += method_lines(cfg)
        body.append("")
    body += ["## Held-out proof", ""] + proof_table(*_comparison_of(run, adapter_dir)) + [""]
    if run:  # "did it keep what the base could do": the newest `qlora-app eval` of the run
        body += ["## General ability: base vs adapter", ""] + benchmarks.eval_table(benchmarks.latest_eval(run)) + [""]
    if run and (run / layout.CURVES).is_file():
        shutil.copyfile(run / layout.CURVES, out / layout.CURVES)
        body += [f"![training curves]({layout.CURVES})", ""]
    body += ["## Use it", ""] + _usage(fmt, files, ollama_name, reads_images)
    card = ModelCard("---\n" + data.to_yaml() + "\n---\n\n" + "\n".join(body) + "\n")
    path = out / "README.md"
    card.save(path)
    return path


def _usage(fmt, files, ollama_name, images: bool = False) -> list[str]:
    if fmt == "adapter" and images:  # PEFT's Auto class opens a causal LM; a vision-language base is opened whole
        return ["```python", "from peft import PeftModel", "from transformers import AutoModelForImageTextToText, "
                "AutoProcessor", "base = AutoModelForImageTextToText.from_pretrained(\"BASE_MODEL\")",
                "model = PeftModel.from_pretrained(base, \"THIS_FOLDER\")",
                "processor = AutoProcessor.from_pretrained(\"BASE_MODEL\")", "```", "",
                "Or chat with it: `qlora-app chat RUN --image PICTURE`."]
    if fmt == "adapter":  # the adapter folder holds the tokenizer too (qlora-app saves it beside the weights)
        return ["```python", "from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer",
                "model = AutoPeftModelForCausalLM.from_pretrained(\"THIS_FOLDER\")",
                "tokenizer = AutoTokenizer.from_pretrained(\"THIS_FOLDER\")", "```", "",
                "Or chat with it: `qlora-app chat RUN`."]
    if fmt == "merged" and images:
        return ["```python", "from transformers import AutoModelForImageTextToText, AutoProcessor",
                "model = AutoModelForImageTextToText.from_pretrained(\"THIS_FOLDER\")",
                "processor = AutoProcessor.from_pretrained(\"THIS_FOLDER\")", "```"]
    if fmt == "merged":
        return ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
                "model = AutoModelForCausalLM.from_pretrained(\"THIS_FOLDER\")",
                "tokenizer = AutoTokenizer.from_pretrained(\"THIS_FOLDER\")", "```"]
    if fmt == "gguf-lora":  # llama.cpp and Ollama apply it over the base's own GGUF, which is not in this folder
        return ["llama.cpp, over a GGUF of the same base model (BASE.gguf: converted from it, any quantization):", "",
                "```sh", f"llama-cli -m BASE.gguf --lora {files['gguf-lora']} -cnv",
                f"llama-server -m BASE.gguf --lora {files['gguf-lora']}", "```", "", "Ollama (a Modelfile beside it):",
                "", "```", "FROM BASE.gguf", f"ADAPTER ./{files['gguf-lora']}", "```"]
    if "mmproj" in files:  # the pictures go through the projector file: llama.cpp's multimodal tools take it
        lines = ["llama.cpp (the language model and its vision projector):", "", "```sh",
                 f"llama-mtmd-cli -m {files['gguf']} --mmproj {files['mmproj']} --image PICTURE.png -p \"...\"",
                 f"llama-server -m {files['gguf']} --mmproj {files['mmproj']}", "```"]
    else:
        lines = ["llama.cpp:", "", "```sh", f"llama-cli -m {files['gguf']} -cnv", "```"]
    if "modelfile" in files:
        lines += ["", "Ollama:", "", "```sh", f"ollama create {ollama_name} -f {files['modelfile']}",
                  f"ollama run {ollama_name}", "```"]
    return lines
