"""`qlora-app eval RUN --tasks ...`: EleutherAI's lm-evaluation-harness on a run's base and on its adapter.

The proof (compare.json) answers "did the adapter learn the task"; this answers "did it keep what the base could do",
with the field's standard harness and its tasks. The run's pair (app/model/pair.py: one base in 4-bit, as trained,
wrapped once with the adapter) is handed to the harness's own HF model class (``HFLM``), and each task runs twice: as
the base (the adapter switched off) and with the adapter on. Same prompts, same generation settings,
same seeds; the only difference is the LoRA deltas.

Tasks: any harness task by name (its data from the hub, or the local cache under --local-only), a YAML file or a
folder of them (``--include-path``, the harness's own task format), and the tasks shipped in ``lm_tasks/``
(``qlora_arith``: the built-in arith test split; ``qlora_gsm8k_file``: any GSM8K-format file, ``--metadata
path=FILE``). Every task is loaded before the model, so a task that needs the network under --local-only, an unknown
name or a task whose data cannot be read is one line and nothing loads.

Each task's rows are checked against the run's training prompts (app/data/leaks.py: the held-out check's exact and
near-duplicate measure): a row the adapter trained on is left out of both sides' figures (the harness's ``samples``),
and the evaluation records how many, with examples (``leaks``), which the terminal, `runs show` and the card say.

Standard library only at import; lm_eval / torch / peft load inside the functions.
"""

from __future__ import annotations

import difflib
import json
import math
import time
from importlib import metadata as md
from pathlib import Path

from app.config.methods import method_of
from app.data import build_splits
from app.data.convert import prompt_text
from app.data.images import undecoded
from app.data.leaks import Leaks, find_leaks
from app.errors import UserError
from app.host.offline import hub_offline, hub_reachable, offline
from app.model.pair import load_pair, open_target
from app.model.placement import context_length
from app.run.lookup import adapter_name

SHIPPED_TASKS = Path(__file__).parent / "lm_tasks"  # qlora_arith, qlora_gsm8k_file
INSTALL_HINT = "pip install 'qlora-app[eval]' (or: pip install lm-eval)"
# Metrics that are shares of the rows (shown as %, their change in points); any other metric is shown as a number.
FIELD_WORDS = 4  # a task row's text field this long or longer is checked against the training prompts on its own
SHARE_METRICS = ("acc", "exact_match", "em", "f1", "mc1", "mc2", "pass@", "prompt_level", "inst_level", "contains")


def lm_eval_version() -> str:
    try:
        return md.version("lm_eval")
    except md.PackageNotFoundError:
        raise UserError(f"`qlora-app eval` runs EleutherAI's lm-evaluation-harness, which is not installed; "
                        f"{INSTALL_HINT}") from None


def parse_metadata(items: list[str]) -> dict:
    """``--metadata path=FILE`` (repeatable) or one JSON object, as the harness's own ``--metadata`` takes it."""
    out: dict = {}
    for item in items:
        item = item.strip()
        if item.startswith("{"):
            try:
                value = json.loads(item)
            except ValueError as e:
                raise UserError(f"--metadata '{item}' is not valid JSON ({e}); pass KEY=VALUE or a JSON object") \
                    from None
            if not isinstance(value, dict):
                raise UserError("--metadata JSON must be an object; pass KEY=VALUE or {\"key\": value}")
            out.update(value)
        elif "=" in item:
            key, value = item.split("=", 1)
            out[key.strip()] = value
        else:
            raise UserError(f"--metadata '{item}' is not KEY=VALUE; e.g. --metadata path=my-test.jsonl")
    return out


def split_tasks(tasks: list[str]) -> list[str]:
    """``--tasks a,b --tasks c`` -> [a, b, c], in order, once each."""
    out: list[str] = []
    for t in tasks:
        out += [x.strip() for x in t.split(",") if x.strip() and x.strip() not in out]
    if not out:
        raise UserError("no task given; pass --tasks NAME (e.g. qlora_arith, or any lm-evaluation-harness task)")
    return out


def _is_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or Path(name).expanduser().is_dir()


def task_manager(tasks: list[str], include_paths: list[Path], meta: dict):
    """The harness's TaskManager over our shipped tasks and ``include_paths``; its ~15,000 built-in tasks are
    indexed (about 6 s) only when a name is not found among ours and the user's."""
    from lm_eval.tasks import TaskManager

    for p in include_paths:
        if not Path(p).expanduser().exists():
            raise UserError(f"--include-path '{p}' does not exist; pass a folder (or a YAML file) of harness tasks")
    paths = [str(SHIPPED_TASKS)] + [str(Path(p).expanduser()) for p in include_paths]
    tm = TaskManager(include_path=paths, include_defaults=False, metadata=meta or None)
    if all(t in tm.all_tasks or _is_path(t) for t in tasks):
        return tm
    tm = TaskManager(include_path=paths, metadata=meta or None)
    for t in tasks:
        if t not in tm.all_tasks and not _is_path(t):
            if Path(t).suffix in (".yaml", ".yml") and not Path(t).exists():
                raise UserError(f"task file '{t}' not found; check the path")
            close = difflib.get_close_matches(t, tm.all_tasks, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else "list them with `lm_eval ls tasks`"
            raise UserError(f"unknown task '{t}': not a harness task, a shipped one (qlora_arith, qlora_gsm8k_file) "
                            f"or one under --include-path; {hint}")
    return tm


def check_tasks(tm, tasks: list[str], local_only: bool) -> dict:
    """Load every task once before any model does ({task: the harness's task}); each failure is one line naming the
    task."""
    loaded_tasks: dict = {}
    for name in tasks:
        entry = tm.task_index.get(name)
        hub = _hub_dataset(entry.cfg if entry is not None and isinstance(entry.cfg, dict) else {})
        unreachable = bool(hub) and not (local_only or hub_offline()) and not hub_reachable()
        try:
            with offline(local_only or unreachable):
                loaded = tm.load([name])
        except Exception as e:  # noqa: BLE001 - the harness raises what its loaders raise; one line each
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:240]
            # the hub's loaders raise ConnectionError (offline mode, no route); a missing local file is not that
            network = not isinstance(e, FileNotFoundError) and (
                isinstance(e, ConnectionError) or any(w in msg.lower() for w in ("offline", "reach", "connection")))
            if network and (local_only or hub_offline()):
                raise UserError(f"task '{name}' needs its data from the Hugging Face Hub"
                                f"{f' ({hub})' if hub else ''}, which is not in this machine's cache, and --local-only "
                                "never downloads; run it once with the network (the harness caches it), or use a "
                                "local task (--include-path)") from None
            if network:
                raise UserError(f"task '{name}' needs its data from the Hugging Face Hub{f' ({hub})' if hub else ''} "
                                f"and it cannot be reached from here ({msg}); use a local task (--include-path)") \
                    from None
            raise UserError(f"task '{name}' could not be loaded: {msg}") from None
        loaded_tasks.update(loaded["tasks"])
    return loaded_tasks


def task_rows(loaded: dict) -> dict[str, int]:
    """{task: rows it evaluates}."""
    return {name: len(task.eval_docs) if task.eval_docs is not None else 0 for name, task in loaded.items()}


def _doc_text(task, doc) -> str:
    """A task row's prompt as the harness builds it (its doc_to_text), '' where it is not text."""
    try:
        text = task.doc_to_text(doc)
    except Exception:  # noqa: BLE001 - a task's template that cannot render a row leaves it unchecked, not the run
        return ""
    return text if isinstance(text, str) else ""


def training_leaks(run_cfg, loaded: dict, local_only: bool) -> dict:
    """{task: app/data/leaks.Leaks}: each task's rows whose prompt repeats one of the run's training prompts (exactly
    once normalised, or nearly: the held-out check's measure and threshold); {} for an adapter without its run's
    config. A benchmark row the adapter trained on measures memory, not ability: such rows are left out."""
    if run_cfg is None:
        return {}
    rows, _, det = build_splits(run_cfg.data, run_cfg.training.seed, local_only,
                                labelled=method_of(run_cfg).rows == "labelled")
    train = [prompt_text(r, det) for r in undecoded(rows)]  # the prompts' text: a picture column is not decoded
    out = {}
    for name, task in loaded.items():
        docs = list(task.eval_docs or [])
        # a row's prompt as the task renders it, and each text field of the row on its own: a task's template
        # ("Question: ...\nAnswer:") around a training prompt must not hide it
        texts = [(i, t) for i, d in enumerate(docs) for t in [_doc_text(task, d)] + _fields(d) if t]
        found = find_leaks(train, [t for _, t in texts])
        exact = sorted({texts[j][0] for j in found.exact})
        near = sorted({texts[j][0] for j in found.near} - set(exact))
        out[name] = Leaks(len(docs), exact, near, found.examples)
    return out


def _fields(doc) -> list[str]:
    """A task row's text fields of a few words or more (its question, passage, ...)."""
    if not isinstance(doc, dict):
        return []
    return [v for v in doc.values() if isinstance(v, str) and len(v.split()) >= FIELD_WORDS]


def clean_samples(rows: dict[str, int], leaks: dict, limit: float | None) -> dict[str, list[int]] | None:
    """The harness's ``samples`` ({task: row indices}) that leave each task's leaked rows out, under ``limit`` (its
    first rows, as the harness's own limit takes them: a share below 1, else a count); None when nothing leaked (the
    harness's own limit then applies)."""
    if not any(leak.leaked for leak in leaks.values()):
        return None
    out = {}
    for name, n in rows.items():
        away = set(leaks[name].leaked) if name in leaks else set()
        take = n if limit is None else math.ceil(n * limit) if limit < 1 else int(limit)
        out[name] = [i for i in range(n) if i not in away][:take]
    return out



def _hub_dataset(cfg: dict) -> str | None:
    """The hub dataset a task's YAML reads, or None for local data (a builder over local files, custom data)."""
    path = cfg.get("dataset_path")
    if not path or cfg.get("custom_dataset") or path in ("json", "csv", "parquet", "text", "arrow", "pandas"):
        return None
    return None if Path(str(path)).expanduser().exists() else str(path)


def _shown_metric(metric: str) -> bool:
    return metric.split(",")[0].startswith(SHARE_METRICS)


def table(results: dict[str, dict], asked: list[str]) -> list[dict]:
    """One row per (task, metric, filter) of the asked tasks and groups: base, adapter, change, and whether the
    change is beyond the noise (more than twice the two sides' combined standard error)."""
    base, adapter = results["base"], results["adapter"]
    rows = []
    for section in ("groups", "results"):
        for task, metrics in (base.get(section) or {}).items():
            if task not in asked and section == "results" and any(t in asked for t in (base.get("groups") or {})):
                continue  # a group's subtasks: the group's row stands for them (all of them are in the file)
            other = (adapter.get(section) or {}).get(task, {})
            for key, b in metrics.items():
                if "_stderr" in key or key in ("alias", "name", "sample_len", " ") or not isinstance(b, (int, float)):
                    continue
                a = other.get(key)
                if not isinstance(a, (int, float)):
                    continue
                metric, _, filt = key.partition(",")
                se = [_num(metrics.get(f"{metric}_stderr,{filt}")), _num(other.get(f"{metric}_stderr,{filt}"))]
                noise = 2 * math.sqrt(sum(s * s for s in se)) if all(s is not None for s in se) else None
                hib = (base.get("higher_is_better") or {}).get(task, {}).get(metric, True)
                delta = float(a) - float(b)
                change = ("within noise" if noise is not None and abs(delta) <= noise else
                          "better" if (delta > 0) == bool(hib) and delta != 0 else "worse" if delta else "same")
                rows.append({"task": task, "metric": metric, "filter": filt or None,
                             "n": (base.get("n-samples") or {}).get(task, {}).get("effective"),
                             "higher_is_better": hib, "share": _shown_metric(key),
                             "base": float(b), "adapter": float(a), "delta": delta,
                             "base_stderr": se[0], "adapter_stderr": se[1], "change": change})
    order = {t: i for i, t in enumerate(asked)}
    return sorted(rows, key=lambda r: (order.get(r["task"], len(order)), r["task"]))


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x)) else None


def _keep(results: dict) -> dict:
    """The harness's result object without its per-sample logs and environment dump (kept apart / dropped)."""
    return {k: v for k, v in results.items() if k in ("results", "groups", "group_subtasks", "configs", "versions",
                                                       "n-shot", "higher_is_better", "n-samples", "config")}


def run_harness(run, tasks: list[str], *, limit: float | None = None, include_paths: list[Path] = (),
                meta: dict | None = None, num_fewshot: int | None = None, batch_size: int = 16,
                chat_template: bool | None = None, max_new_tokens: int | None = None, local_only: bool = False,
                model: str | None = None, on_side=None) -> dict:
    """The harness on base and adapter. ``chat_template`` None: the run's chat template and system prompt when its
    tokenizer has one (how the adapter was trained to be asked). ``max_new_tokens``: the generation tasks' answer
    length (default: each task's own). ``on_side(side, i, n)`` before each side runs.
    Returns the evaluation as it is kept (RUN/evals/*.json) with ``samples`` ({side: {task: [...]}}) beside it."""
    version = lm_eval_version()
    tasks = split_tasks(tasks)
    target = open_target(run, model, local_only)
    adapter_dir, mc = target.adapter_dir, target.base
    tm = task_manager(tasks, list(include_paths), meta or {})
    loaded_tasks = check_tasks(tm, tasks, local_only)
    rows = task_rows(loaded_tasks)
    # the tasks' rows that repeat the run's training prompts: measured without them (before any model loads)
    leaks = training_leaks(target.run_cfg, loaded_tasks, local_only)
    samples_asked = clean_samples(rows, leaks, limit)

    import lm_eval
    from lm_eval.models.huggingface import HFLM

    t0 = time.monotonic()
    pair = load_pair(target, local_only)
    peft_model, tok = pair.model, pair.tok
    templated = bool(getattr(tok, "chat_template", None)) if chat_template is None else chat_template
    if templated and not getattr(tok, "chat_template", None):
        raise UserError("--chat-template: this model's tokenizer has no chat template; drop it")
    system = target.system_prompt if templated else None
    lm = HFLM(pretrained=peft_model, tokenizer=tok, batch_size=batch_size,
              max_length=context_length(peft_model.config) or 2048)
    loaded_s = time.monotonic() - t0
    out, samples, seconds = {}, {}, {}
    for i, side in enumerate(("base", "adapter")):
        if on_side:
            on_side(side, i, 2)
        t1 = time.monotonic()
        try:
            with pair.side(side):
                res = lm_eval.simple_evaluate(
                    model=lm, tasks=tasks, task_manager=tm, num_fewshot=num_fewshot,
                    **({"samples": samples_asked} if samples_asked else {"limit": limit}),
                    gen_kwargs={"max_gen_toks": max_new_tokens} if max_new_tokens else None,
                    apply_chat_template=templated, system_instruction=system, log_samples=True,
                    random_seed=0, numpy_random_seed=1234, torch_random_seed=1234, fewshot_random_seed=1234)
        except (AssertionError, ValueError) as e:  # the harness checks a task's settings against the model here
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:240].rstrip(".")
            hint = ("; pass --max-new-tokens N below it" if "max tokens" in msg or "sequence length" in msg
                    else "")
            raise UserError(f"lm-evaluation-harness stopped on {', '.join(tasks)} ({side}): {msg}{hint}") from None
        seconds[side] = round(time.monotonic() - t1, 2)
        out[side] = _keep(res)
        samples[side] = res.get("samples") or {}
    return {
        "kind": "lm-eval", "lm_eval_version": version, "run": adapter_name(adapter_dir), "adapter": str(adapter_dir),
        "base_model": mc.name_or_path, "tasks": tasks, "rows_per_task": rows, "limit": limit,
        "num_fewshot": num_fewshot, "max_new_tokens": max_new_tokens, "chat_template": templated,
        "system_instruction": system,
        "include_paths": [str(Path(p).expanduser().resolve()) for p in include_paths], "metadata": meta or {},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": {"load": round(loaded_s, 2), **seconds},
        "table": table(out, tasks), "results": out, "samples": samples,
        "leaks": {name: {"rows": leak.heldout, "leaked": len(leak.leaked), "exact": len(leak.exact),
                         "near": len(leak.near), "examples": [list(e) for e in leak.examples]}
                  for name, leak in leaks.items()},
    }
