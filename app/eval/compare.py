"""Base vs adapter: the same prompts through the 4-bit base with the LoRA adapter off and on, scored alike.

One base model is loaded (4-bit, as in training) and wrapped once with the adapter. The "base" side runs inside
PEFT's ``disable_adapter()`` context, so both sides share every weight except the LoRA deltas and there is no
second copy of the model in memory. (A known failure of other tools is a "base" side that silently kept the
adapter on; tests/test_compare.py checks the base side token for token against a plainly loaded base.)

Prompts are formatted the way training formatted them (the run's system prompt + the tokenizer's chat template)
and generated in left-padded batches: decoder-only models continue from the last position, so padding must sit
on the left for every row's continuation to start right after its own prompt.

Only the standard library and app modules are imported at module level; torch / transformers / peft are imported
inside functions so `qlora-app --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from app import rundir
from app.config import DataConfig, ModelConfig, TrainingConfig, load_yaml_file, validate
from app.cpu_threads import ThreadGovernor
from app.errors import UserError
from app.eval.heldout import heldout_examples
from app.eval.result import Cell, Comparison, Row
from app.models import check_model_source, context_length, load_base_model
from app.rewards import is_correct, score_completion
from app.runtime import apply_local_only

# ---------------------------------------------------------------------------------------------- what to compare


def _read_adapter_base(adapter_dir: Path) -> str | None:
    try:
        data = json.loads((adapter_dir / rundir.ADAPTER_CONFIG).read_text())
    except (OSError, ValueError):
        raise UserError(f"'{adapter_dir / rundir.ADAPTER_CONFIG}' is not valid JSON; pass an adapter saved by PEFT") \
            from None
    if not isinstance(data, dict) or "peft_type" not in data:
        raise UserError(f"'{adapter_dir}' has an {rundir.ADAPTER_CONFIG} without peft_type; it is not a PEFT adapter")
    return data.get("base_model_name_or_path")


def _find_run_config(adapter_dir: Path):
    """The AppConfig of the run that produced this adapter (rundir.run_of_adapter), or None."""
    run = rundir.run_of_adapter(adapter_dir)
    return validate(load_yaml_file(run / rundir.CONFIG)) if run else None


def _same_model(a: str, b: str) -> bool:
    """Names a user would consider the same base: equal ids, the same folder, or a local copy of a hub id."""
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    # 'Qwen/Qwen2.5-1.5B-Instruct' vs './models/Qwen2.5-1.5B-Instruct': a local download of the same model.
    # A real mismatch that slips through here is still caught by PEFT's shape check when loading.
    return pa.name.lower() == pb.name.lower()


def resolve_target(adapter: str | Path, model: str | None = None):
    """(adapter_dir, run config or None, ModelConfig of the base to load, the base it was trained on or None).
    Raises UserError when --model names a different base than the one the adapter was trained on."""
    adapter_dir = rundir.find_adapter(adapter)
    adapter_base = _read_adapter_base(adapter_dir)
    run_cfg = _find_run_config(adapter_dir)
    trained_on = (run_cfg.model.name_or_path if run_cfg else None) or adapter_base
    if model is None and trained_on is None:
        raise UserError(f"'{adapter_dir}' does not say which base model it was trained on; pass --model NAME|DIR")
    if model is not None and trained_on is not None and not _same_model(model, trained_on):
        raise UserError(f"adapter '{adapter_dir}' was trained on base '{trained_on}', not on '{model}'; "
                        f"drop --model or pass --model {trained_on}")
    mc = run_cfg.model.model_copy() if run_cfg else ModelConfig()
    mc.name_or_path = model or trained_on
    return adapter_dir, run_cfg, mc, trained_on


def _data_config(run_cfg, dataset, prompt_field, reference_field):
    base = run_cfg.data if run_cfg else DataConfig()
    if dataset is not None and dataset != base.dataset:
        # A different dataset: the run's split / field names do not apply to it; its system prompt still does,
        # because it is part of how the adapter was taught to answer.
        dc = DataConfig(dataset=dataset, system_prompt=base.system_prompt)
    else:
        dc = base.model_copy()
    if prompt_field:
        dc.prompt_field = prompt_field
    if reference_field:
        dc.reference_field = reference_field
    return dc


def collect_prompts(run_cfg, dataset, num_samples, prompts, prompt_field, reference_field, seed, local_only):
    """[{prompt, reference, source, messages, plain}]: seeded held-out rows first, then the user's prompts."""
    system_prompt = run_cfg.data.system_prompt if run_cfg else None
    items: list[dict] = []
    if num_samples > 0:
        dc = _data_config(run_cfg, dataset, prompt_field, reference_field)
        if not dc.dataset:
            raise UserError("--num-samples needs a dataset and this adapter has no run config; pass --dataset D")
        # Held-out rows depend on the seed the run split its data with (training.seed), never on --seed.
        split_seed = (run_cfg.training if run_cfg else TrainingConfig()).seed
        for ex in heldout_examples(dc, num_samples, seed, local_only, split_seed=split_seed,
                                   system_prompt=system_prompt):
            items.append({**ex, "source": "heldout"})
        if not items and not any(p and p.strip() for p in prompts):
            raise UserError(f"'{dc.dataset}' has no held-out rows to compare on (too few rows to hold any out, or "
                            "data.heldout_size=0); pass --prompt TEXT, or --dataset FILE with rows the adapter did "
                            "not train on")
    for p in prompts:
        if p and p.strip():
            msgs = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
                {"role": "user", "content": p}]
            items.append({"prompt": p, "reference": None, "source": "prompt", "messages": msgs,
                          "plain": f"{system_prompt}\n\n{p}" if system_prompt else p})
    if not items:
        raise UserError("nothing to compare; pass --num-samples N (held-out rows) and/or --prompt TEXT")
    return items


def format_prompt(tok, item: dict) -> str:
    """The exact text training put before a completion: the chat template with a generation prompt when the
    tokenizer has one (TRL does the same with conversational prompts), else the plain prompt."""
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template(item["messages"], tokenize=False, add_generation_prompt=True)
    return item["plain"]


# ---------------------------------------------------------------------------------------------- generation


def prompt_room(model, max_new_tokens: int) -> int | None:
    """How many prompt tokens fit beside max_new_tokens in the model's context (None: the config does not say)."""
    context = context_length(model.config)
    if context is None:
        return None
    if max_new_tokens >= context:
        raise UserError(f"--max-new-tokens {max_new_tokens} fills the model's whole {context}-token context; "
                        f"set it below {context}")
    return context - max_new_tokens


def decoding(model, tok, max_new_tokens: int, temperature: float) -> dict:
    """generate()'s decoding arguments, shared by compare and chat: greedy at temperature 0, else plain sampling
    (no top-k / top-p: the distribution the temperature gives)."""
    eos = model.generation_config.eos_token_id
    gen_kw = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                  eos_token_id=eos if eos is not None else tok.eos_token_id)
    if temperature > 0:
        gen_kw.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
    else:
        gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    return gen_kw


def generate(model, tok, texts: list[str], max_new_tokens: int = 128, temperature: float = 0.0,
             batch_size: int = 16, seed: int = 0, on_batch: Callable[[int], None] | None = None) -> list[dict]:
    """Left-padded batched generation. Returns [{text, tokens, prompt_cut}] in the order of ``texts``.

    Rows are batched by prompt length (longest first) so a batch carries little padding; greedy unless
    temperature > 0, and sampling is seeded so a comparison can be re-run. A prompt longer than the model's
    context leaves beside max_new_tokens keeps its end (where the question and the generation prompt are) and is
    marked prompt_cut."""
    import torch

    tok.padding_side = "left"
    tok.truncation_side = "left"
    room = prompt_room(model, max_new_tokens)
    # The chat template already adds BOS where the model wants it; adding special tokens again would double it.
    add_special = not getattr(tok, "chat_template", None)
    lengths = [len(tok(t, add_special_tokens=add_special)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    gen_kw = decoding(model, tok, max_new_tokens, temperature)
    torch.manual_seed(seed)
    out: list[dict | None] = [None] * len(texts)
    device = next(model.parameters()).device
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=add_special,
                  truncation=room is not None, max_length=room)
        enc = {k: v.to(device) for k, v in enc.items()}
        with torch.inference_mode():
            seqs = model.generate(**enc, **gen_kw)
        new = seqs[:, enc["input_ids"].shape[1]:]
        for row, i in enumerate(idx):
            ids = [t for t in new[row].tolist() if t != tok.pad_token_id]
            out[i] = {"text": tok.decode(ids, skip_special_tokens=True).strip(), "tokens": len(ids),
                      "prompt_cut": room is not None and lengths[i] > room}
        if on_batch:
            on_batch(len(idx))
    return out  # type: ignore[return-value]


def load_pair(mc, adapter_dir: Path, local_only: bool, trained_on: str | None = None, device: str = "auto"):
    """(PeftModel, tokenizer): the base loaded once in 4-bit and wrapped with the adapter (inference only)."""
    from peft import PeftModel

    base, tok, _ = load_base_model(mc, local_only=local_only, for_training=False, device=device)
    try:
        model = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as e:
        # A different base shows up as a state-dict size mismatch or as target modules missing from the model;
        # PEFT's message is many lines, keep the first telling one.
        lines = [ln.strip().rstrip(":") for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
        detail = next((ln for ln in lines if "size mismatch" in ln or "not found" in ln), lines[0])[:200]
        other = f" (it was trained on '{trained_on}')" if trained_on and trained_on != mc.name_or_path else ""
        raise UserError(f"adapter '{adapter_dir}' does not fit base '{mc.name_or_path}'{other}: {detail}; "
                        "pass the base it was trained on with --model") from None
    model.eval()
    return model, tok


# ---------------------------------------------------------------------------------------------- scoring


def score_cell(out: dict, reference: str | None, reward_cfg) -> Cell:
    """A generated answer ({text, tokens}) scored with the run's shaped reward, as training scored it."""
    s = score_completion(out["text"], reference, reward_cfg)
    # A component that failed on this text scores None (as in training); keep it None, the means skip it.
    comps = {k: None if v is None else float(v) for k, v in s["components"].items()}
    return Cell(text=out["text"], tokens=out["tokens"], reward=float(s["total"] or 0.0), components=comps,
                correct=is_correct(out["text"], reference) if reference is not None else None)


# ---------------------------------------------------------------------------------------------- public API


def run_comparison(adapter, model=None, dataset=None, num_samples=0, prompts=(), prompt_field=None,
                   reference_field=None, max_new_tokens=128, temperature=0.0, batch_size=16, seed=0,
                   local_only=False, progress=None, record=True) -> Comparison:
    """Compare base and adapter (``Comparison.to_dict()`` is the --json schema).
    ``progress``: optional callable(done, total) called after each generated batch (total = 2 x prompts).
    ``record``: a comparison of a run's final adapter is kept as the run's latest (RUN/compare.json): the proof
    `runs show`, the UI and an export's model card show."""
    if temperature < 0:
        raise UserError(f"--temperature must be >= 0 (got {temperature}); 0 means greedy")
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1 (got {max_new_tokens})")
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1 (got {batch_size})")
    if local_only:
        apply_local_only(True)
    adapter_dir, run_cfg, mc, trained_on = resolve_target(adapter, model)
    if num_samples <= 0 and not any(p and p.strip() for p in prompts):
        raise UserError("nothing to compare; pass --num-samples N (held-out rows) and/or --prompt TEXT")

    check_model_source(mc.name_or_path, local_only)  # a missing base fails in a second, before any data loads
    ThreadGovernor()  # the cores other processes leave free (OMP_NUM_THREADS fixes it)
    items = collect_prompts(run_cfg, dataset, num_samples, list(prompts), prompt_field, reference_field, seed,
                            local_only)
    peft_model, tok = load_pair(mc, adapter_dir, local_only, trained_on,
                                device=run_cfg.runtime.device if run_cfg else "auto")
    system_prompt = run_cfg.data.system_prompt if run_cfg else None
    texts = [format_prompt(tok, it) for it in items]

    total, done = 2 * len(texts), 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    gen = dict(max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size, seed=seed,
               on_batch=tick)
    with peft_model.disable_adapter():
        base_out = generate(peft_model, tok, texts, **gen)
    adapter_out = generate(peft_model, tok, texts, **gen)

    reward_cfg = run_cfg.reward if run_cfg else None
    rows = [Row(prompt=it["prompt"], reference=it["reference"], source=it["source"],
                base=score_cell(b, it["reference"], reward_cfg), adapter=score_cell(a, it["reference"], reward_cfg))
            for it, b, a in zip(items, base_out, adapter_out)]
    config = {"adapter": str(adapter_dir), "base_model": mc.name_or_path, "trained_on": trained_on,
              "load_in_4bit": mc.load_in_4bit, "dataset": _dataset_name(run_cfg, dataset, num_samples),
              "num_samples": num_samples, "num_prompts": len([p for p in prompts if p and p.strip()]),
              "system_prompt": system_prompt, "max_new_tokens": max_new_tokens, "temperature": temperature,
              "greedy": temperature == 0, "batch_size": batch_size, "seed": seed, "local_only": local_only,
              # prompts longer than the model's context beside max_new_tokens: both sides saw only their end
              "prompts_cut": sum(o["prompt_cut"] for o in base_out)}
    result = Comparison.of(rows, config)
    run = adapter_dir.parent
    if record and adapter_dir.name == rundir.ADAPTER and rundir.is_run_dir(run):
        rundir.record_comparison(run, result.to_dict())
    return result


def _dataset_name(run_cfg, dataset, num_samples):
    if num_samples <= 0:
        return None
    return dataset or (run_cfg.data.dataset if run_cfg else None)


