"""`qlora-app eval RUN --tasks`: lm-evaluation-harness on a trained run's base and adapter (4-bit, PEFT), on the
shipped local tasks: the answers are compare's, the lift is the proof's, the evaluation is kept in the run and shown
by `runs show`, `runs list --json` and the model card; a task that needs the network under --local-only, an unknown
task and a task without its file are one line each, before any model loads."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import cli as _cli
from conftest import cli_here
from repo_paths import GSM8K

from app.run import benchmarks, layout

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(quick_demo, tmp_path_factory) -> Path:
    """A copy of the quick demo's GRPO run (other tests may run the demo again into its folder)."""
    r, out = quick_demo
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path_factory.mktemp("eval") / "demo-grpo"
    shutil.copytree(out / "demo-grpo", run, ignore=shutil.ignore_patterns(layout.CHECKPOINTS))
    return run


def test_the_harness_scores_base_and_adapter_as_compare_does_and_the_run_keeps_it(trained, tmp_path):
    from app.eval.compare import run_comparison

    r = _cli("eval", str(trained), "--tasks", "qlora_arith", "--limit", "100", "--local-only")
    assert r.returncode == 0, r.stderr[-3000:]
    said = " ".join(r.stdout.split())
    assert "general ability: base vs adapter" in said and "qlora_arith" in said
    files = benchmarks.evals(trained)
    assert len(files) == 1 and files[0].parent.name == layout.EVALS
    ev = json.loads(files[0].read_text())
    (row,) = [x for x in ev["table"] if x["task"] == "qlora_arith"]
    assert row["n"] == 100 and row["metric"] == "exact_match" and ev["chat_template"]
    assert ev["system_instruction"] and ev["lm_eval_version"]
    # The run learnt the task: its adapter is ahead of its base on the harness's count too, as in its proof.
    proof = json.loads((trained / layout.COMPARE_JSON).read_text())["summary"]
    assert row["adapter"] - row["base"] >= 0.10, row
    assert proof["adapter"]["accuracy"] - proof["base"]["accuracy"] >= 0.10
    assert row["change"] == "better"
    # Each side is what compare calls it: the base with the adapter off, the adapter on; the same greedy answers.
    samples = [json.loads(x) for x in (trained / layout.EVALS / ev["samples_file"]).read_text().splitlines()]
    assert len(samples) == 100
    first = samples[:6]
    questions = [s["prompt"].split("<|user|>\n", 1)[1].split("\n<|assistant|>", 1)[0] for s in first]
    cmp = run_comparison(trained, prompts=questions, max_new_tokens=64, temperature=0.0, batch_size=1, record=None)
    for s, c in zip(first, cmp.rows):
        raw = {"base": c.base.text, "adapter": c.adapter.text}
        for side in ("base", "adapter"):
            numbers = [t.strip(".,") for t in raw[side].split("\n\n")[0].split() if t.strip(".,").lstrip("-").isdigit()]
            assert s[side] == (numbers[-1] if numbers else "[invalid]"), (side, s, raw[side])
    assert any(s["base"] != s["adapter"] for s in samples)
    # Shown where a run is read: runs show, runs list --json, the model card.
    shown = _cli("runs", "show", str(trained))
    assert shown.returncode == 0 and "general ability" in shown.stdout
    listed = [json.loads(x) for x in _cli("runs", "list", str(trained.parent), "--json").stdout.splitlines()]
    assert "qlora_arith exact_match" in listed[0]["general_ability"]
    from app.ui.run_view import status_markdown

    shown_in_ui = status_markdown(listed[0])
    assert f"general ability: qlora_arith exact_match [last-number] base {row['base']:.1%}" in shown_in_ui
    out = tmp_path / "export"
    ex = _cli("export", str(trained), "--out", str(out))
    assert ex.returncode == 0, ex.stderr[-2000:]
    card = (out / "README.md").read_text()
    assert "## General ability: base vs adapter" in card
    assert f"| qlora_arith | exact_match (last-number) | 100 | {row['base']:.1%} | {row['adapter']:.1%} |" in card


def _task(tmp_path: Path, name: str, rows: Path, prompt: str, tokens: int) -> Path:
    """A folder holding one generation task of one's own over a JSON-lines file of {q, a} rows."""
    own = tmp_path / "tasks"
    own.mkdir()
    (own / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {rows}\n"
        f"output_type: generate_until\ntest_split: test\ndoc_to_text: '{prompt}'\ndoc_to_target: '{{{{a}}}}'\n"
        f"generation_kwargs:\n  until: ['\\n\\n']\n  max_gen_toks: {tokens}\n  do_sample: false\nmetric_list:\n"
        "  - metric: exact_match\n")
    return own


def test_a_gsm8k_format_file_and_a_task_of_ones_own(trained, tmp_path):
    if not GSM8K.is_file():
        pytest.skip("../shared/data/gsm8k_train.jsonl is not here")
    own = _task(tmp_path, "my_sums", tmp_path / "sums.jsonl", "{{q}}", 16)
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps({"q": f"What is {a} + 1?", "a": str(a + 1)}) + "\n"
                                                 for a in range(6)))
    r = _cli("eval", str(trained), "--tasks", "qlora_gsm8k_file,my_sums", "--metadata", f"path={GSM8K}",
             "--include-path", str(own), "--limit", "4", "--max-new-tokens", "48", "--local-only",
             "--json", str(tmp_path / "ev.json"))
    assert r.returncode == 0, r.stderr[-3000:]
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert [x["task"] for x in ev["table"]] == ["qlora_gsm8k_file", "my_sums"]
    assert all(x["n"] == 4 for x in ev["table"]) and ev["max_new_tokens"] == 48
    assert ev["metadata"] == {"path": str(GSM8K)}
    assert len(benchmarks.evals(trained)) >= 1  # kept in the run as well as in --json


@pytest.mark.parametrize("args, says", [
    (["--tasks", "gsm8k", "--local-only"], "needs its data from the Hugging Face Hub (openai/gsm8k)"),
    (["--tasks", "gsm8k_nope", "--local-only"], "unknown task 'gsm8k_nope'"),
    (["--tasks", "qlora_gsm8k_file", "--local-only"], "needs the file: pass --metadata path=FILE"),
    (["--tasks", "qlora_arith", "--metadata", "path"], "--metadata 'path' is not KEY=VALUE"),
    (["--tasks", "qlora_arith", "--limit", "0"], "--limit must be > 0"),
    (["--tasks", "qlora_arith", "--include-path", "/nowhere/tasks"], "--include-path '/nowhere/tasks' does not exist"),
])
def test_bad_requests_are_one_line_before_any_model_loads(trained, args, says):
    before = sorted(p.name for p in trained.rglob("*"))
    r = cli_here("eval", str(trained), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = " ".join(r.stderr.split())
    assert says in line, line
    assert "Running" not in r.stderr  # no request ran
    assert sorted(p.name for p in trained.rglob("*")) == before  # nothing written into the run


def test_task_rows_the_adapter_trained_on_are_left_out(trained, tmp_path):
    from app.config.build import load_yaml_file, validate
    from app.data import build_splits
    from app.data.convert import prompt_text

    cfg = validate(load_yaml_file(trained / layout.CONFIG))
    rows, held, det = build_splits(cfg.data, cfg.training.seed, True)
    seen = [prompt_text(r, det) for r in rows.select(range(3))]
    fresh = [prompt_text(r, det) for r in held.select(range(5))]
    # three training prompts: as they are, shouted with its spacing changed, and under the task's own template
    asked = [seen[0], "  " + seen[1].upper().replace(" ", "   "), seen[2]] + fresh
    own = _task(tmp_path, "mixed_sums", tmp_path / "m.jsonl", "Problem: {{q}}\\nSolution:", 8)
    (tmp_path / "m.jsonl").write_text("".join(json.dumps({"q": q, "a": "1"}) + "\n" for q in asked))
    r = _cli("eval", str(trained), "--tasks", "mixed_sums", "--include-path", str(own), "--local-only",
             "--json", str(tmp_path / "ev.json"))
    assert r.returncode == 0, r.stderr[-3000:]
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["leaks"]["mixed_sums"] | {"examples": None} == {"rows": 8, "leaked": 3, "exact": 3, "near": 0,
                                                              "examples": None}
    (row,) = ev["table"]
    assert row["n"] == 5  # both sides measured on the five rows it never trained on
    said = " ".join(r.stdout.split())
    assert "mixed_sums: 3 of 8 rows repeat a training prompt (3 exactly once normalised, 0 nearly) and are left " \
           "out" in said
    assert "3 of 8 rows repeat a training prompt" in benchmarks.eval_text(ev)
    assert any("3 of 8 rows repeat" in line for line in benchmarks.eval_table(ev))


def test_clean_samples_keep_the_harness_limit_on_the_clean_rows():
    from app.data.leaks import Leaks
    from app.eval.harness import clean_samples

    leaks = {"a": Leaks(10, [0, 3], [4]), "b": Leaks(4)}
    assert clean_samples({"a": 10, "b": 4}, {"b": Leaks(4)}, None) is None  # nothing leaked: the harness's own limit
    assert clean_samples({"a": 10, "b": 4}, leaks, None) == {"a": [1, 2, 5, 6, 7, 8, 9], "b": [0, 1, 2, 3]}
    assert clean_samples({"a": 10, "b": 4}, leaks, 3) == {"a": [1, 2, 5], "b": [0, 1, 2]}  # a count
    assert clean_samples({"a": 10, "b": 4}, leaks, 0.5) == {"a": [1, 2, 5, 6, 7], "b": [0, 1]}  # a share, rounded up
