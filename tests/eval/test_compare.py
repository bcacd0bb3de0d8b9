"""compare: the base side really is the base, the adapter side really uses the adapter, outputs and errors.

Everything runs for real on tiny random models in 4-bit on CPU: a LoRA adapter with deliberately non-zero weights
(init_lora_weights=False, so B is not zero and the adapter changes the model), a run directory around it, and the
small local math dataset from conftest.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_here
from fakes import SYSTEM, make_adapter, write_run
from repo_paths import ROOT

from app.errors import UserError

PROMPTS = [
    "Tom has 3 apples and buys 4 more. How many apples does he have?",
    "Write a short poem about the sea.",
    "2 + 2",
    "The quick brown fox jumps over the lazy dog. Solve the problem step by step, briefly, and give the answer.",
]


@pytest.fixture(scope="module")
def adapter_dir(tiny_models, tmp_path_factory) -> Path:
    return make_adapter(tiny_models["qwen3"], tmp_path_factory.mktemp("adapter") / "adapter")


@pytest.fixture()
def run_dir(tmp_path, tiny_models, adapter_dir, math_jsonl) -> Path:
    return write_run(tmp_path / "run", tiny_models["qwen3"], adapter_dir, math_jsonl)


def plain_base_outputs(base_dir: Path, prompts: list[str], max_new_tokens: int) -> list[str]:
    """The base model loaded on its own (4-bit, no PEFT anywhere), one prompt at a time, greedy."""
    import torch

    from app.config.schema import ModelConfig
    from app.model.load import load_base_model

    model, tok, info = load_base_model(ModelConfig(name_or_path=str(base_dir)), for_training=False)
    assert info["4bit"]
    out = []
    for p in prompts:
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}],
                                       tokenize=False, add_generation_prompt=True)
        enc = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            seq = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        out.append(tok.decode(seq[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip())
    return out


@pytest.mark.slow
def test_base_side_is_the_plain_base_and_adapter_side_differs(run_dir, tiny_models):
    from app.eval.compare import run_comparison

    seen = []
    res = run_comparison(run_dir, prompts=PROMPTS, max_new_tokens=16, batch_size=16,
                         progress=lambda d, t: seen.append((d, t))).to_dict()
    base = [r["base"]["text"] for r in res["rows"]]
    adapter = [r["adapter"]["text"] for r in res["rows"]]
    # Batched + left-padded + adapter disabled must give exactly what the plain base gives unbatched.
    assert base == plain_base_outputs(tiny_models["qwen3"], PROMPTS, 16)
    assert all(b != a for b, a in zip(base, adapter)), "the adapter side did not change any output"
    assert seen[-1] == (2 * len(PROMPTS), 2 * len(PROMPTS))
    assert res["config"]["base_model"] == str(tiny_models["qwen3"]) and res["config"]["greedy"]


@pytest.mark.slow
def test_json_and_html_on_heldout_rows(run_dir, tmp_path):
    from rich.console import Console

    from app.cli.compare import run_compare_cli

    evil = "<script>alert('x')</script> & <img src=https://example.com/a.png>"
    out_json, out_html = tmp_path / "c.json", tmp_path / "c.html"
    console = Console(record=True, width=160)
    rc = run_compare_cli(run_dir, num_samples=4, prompts=[evil], max_new_tokens=8, json_out=out_json,
                         html_out=out_html, console=console)
    assert rc == 0
    res = json.loads(out_json.read_text())
    assert set(res) == {"rows", "summary", "config", "preference"} and res["preference"] is None  # no pairs here
    assert len(res["rows"]) == 5
    heldout = [r for r in res["rows"] if r["reference"] is not None]
    assert len(heldout) == 4 and res["rows"][-1]["prompt"] == evil and res["rows"][-1]["reference"] is None
    dataset_questions = {json.loads(line)["question"] for line in Path(res["config"]["dataset"]).open()}
    for r in res["rows"]:
        assert isinstance(r["prompt"], str)
        for side in ("base", "adapter"):
            c = r[side]
            assert isinstance(c["text"], str) and isinstance(c["reward"], float)
            assert set(c["components"]) >= {"length", "format", "reference", "boilerplate"}
            assert c["correct"] in (True, False) if r["reference"] is not None else c["correct"] is None
    assert all(r["prompt"] in dataset_questions for r in heldout)
    # Held-out means never trained on: none of the rows may come from the run's training split.
    from app.config.build import load_yaml_file, validate
    from app.data import build_splits

    cfg = validate(load_yaml_file(run_dir / "config.yaml"))
    train, _, _ = build_splits(cfg.data, cfg.training.seed)
    assert not {r["prompt"] for r in heldout} & set(train["question"])
    s = res["summary"]
    assert s["wins"] + s["ties"] + s["losses"] == 4 and s["n"] == 4  # the held-out rows; the typed prompt is shown
    assert s["prompts"] == 1 and s["heldout"]
    for side in ("base", "adapter"):
        assert 0.0 <= s[side]["accuracy"] <= 1.0 and s[side]["n_judged"] == 4
        mean = sum(r[side]["reward"] for r in heldout) / 4  # the typed prompt is not a sample of the data
        assert s[side]["mean_reward"] == pytest.approx(mean)
        assert set(s[side]["components"]) >= {"length", "format", "reference", "boilerplate"}
        assert 0.0 <= s[side]["boilerplate_rate"] <= 1.0 and s[side]["mean_length"] >= 0
    assert res["config"]["num_samples"] == 4 and res["config"]["seed"] == 0

    html = out_html.read_text()
    assert html.startswith("<!DOCTYPE html>") and "adapter vs base: " in html and "a change in correctness decides" in html
    tags = _tags(html)
    assert not [t for t in tags if t[0] in ("script", "img", "link", "iframe")], "page has active/external tags"
    urls = [v for _, attrs in tags for k, v in attrs if k in ("src", "href") and v]
    assert not [u for u in urls if re.match(r"\s*(https?:)?//", u)], f"page loads external assets: {urls}"
    assert "&lt;script&gt;" in html and "&lt;img src=https://example.com" in html  # user/model text is escaped
    assert html.count('class="side"') == 2 * 5
    terminal = console.export_text()
    assert "wins" in terminal and "mean reward" in terminal

    with pytest.raises(UserError, match="already exists"):  # results are never overwritten
        run_compare_cli(run_dir, prompts=["x"], json_out=out_json, console=console)


@pytest.mark.slow
def test_sampling_is_seeded(run_dir):
    from app.eval.compare import run_comparison

    kw = dict(prompts=PROMPTS[:2], max_new_tokens=8, temperature=1.0)
    a = run_comparison(run_dir, seed=3, **kw).to_dict()
    b = run_comparison(run_dir, seed=3, **kw).to_dict()
    assert [r["adapter"]["text"] for r in a["rows"]] == [r["adapter"]["text"] for r in b["rows"]]
    assert not a["config"]["greedy"]


def test_adapter_from_another_base_is_a_user_error(run_dir, tiny_models):
    from app.eval.compare import run_comparison

    with pytest.raises(UserError) as e:
        run_comparison(run_dir, model=str(tiny_models["llama"]), prompts=["hi"])
    assert str(tiny_models["llama"]) in str(e.value) and str(tiny_models["qwen3"]) in str(e.value)


def test_shape_mismatch_names_both_models(tmp_path, adapter_dir, tiny_models):
    """No run config and adapter_config pointing at a differently shaped model: PEFT's size error, reworded."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    other = tmp_path / "other-base"
    tok = AutoTokenizer.from_pretrained(tiny_models["qwen3"])
    cfg = AutoConfig.for_model("qwen3", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                               tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(other)
    tok.save_pretrained(other)
    moved = tmp_path / "bare-adapter"
    shutil.copytree(adapter_dir, moved)
    ac = json.loads((moved / "adapter_config.json").read_text())
    trained_on = ac["base_model_name_or_path"]
    ac["base_model_name_or_path"] = str(other)
    (moved / "adapter_config.json").write_text(json.dumps(ac))

    from app.eval.compare import run_comparison

    with pytest.raises(UserError, match="does not fit base") as e:
        run_comparison(moved, prompts=["hi"], max_new_tokens=2)
    assert str(other) in str(e.value) and "size mismatch" in str(e.value)
    assert trained_on != str(other)


def test_nothing_to_compare(run_dir):
    from app.eval.compare import run_comparison

    with pytest.raises(UserError, match="nothing to compare"):
        run_comparison(run_dir)
    with pytest.raises(UserError, match="nothing to compare"):
        run_comparison(run_dir, prompts=["  "])


def test_a_dataset_too_small_to_hold_rows_out_says_so(run_dir, tmp_path):
    """3 rows: none are held out; '--num-samples 5' must not be told to pass --num-samples."""
    import json

    from app.eval.compare import run_comparison

    small = tmp_path / "three.jsonl"
    small.write_text("".join(json.dumps({"question": f"What is {i}+1?", "answer": str(i + 1)}) + "\n"
                             for i in range(3)))
    with pytest.raises(UserError, match="has no held-out rows to compare on .*; pass --prompt TEXT"):
        run_comparison(run_dir, dataset=str(small), num_samples=5)


def _tags(html: str) -> list[tuple[str, list]]:
    from html.parser import HTMLParser

    found = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    P().feed(html)
    return found


def _cli(*args, script=False):
    """compare_base_vs_lora.py in its own process (the script is the subject), `qlora-app compare` in this one."""
    if script:
        return subprocess.run([sys.executable, "compare_base_vs_lora.py", *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    return cli_here("compare", *args, cwd=ROOT)


@pytest.mark.parametrize("script", [False, True], ids=["qlora-app", "compare_base_vs_lora.py"])
def test_cli_exit_codes(script, tmp_path, run_dir, tiny_models):
    (tmp_path / "not-peft").mkdir()
    (tmp_path / "not-peft" / "config.json").write_text("{}")
    for args, needle in [
        (["--adapter", tmp_path / "missing", "--prompt", "hi"], "not found"),
        (["--adapter", tmp_path / "not-peft", "--prompt", "hi"], "no PEFT adapter"),
        (["--adapter", run_dir, "--model", tiny_models["llama"], "--prompt", "hi"], "trained on base"),
        ([], "which adapter? qlora-app compare RUN"),
        ([run_dir, "--adapter", tmp_path / "not-peft", "--prompt", "hi"], "two adapters given"),
        ([tmp_path / "not-peft", "--prompt", "hi"], "no PEFT adapter"),  # the run as an argument, as elsewhere
    ]:
        p = _cli(*args, script=script)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and needle in p.stderr.replace("\n", " ")
        if needle == "trained on base":
            flat = p.stderr.replace("\n", "")
            assert str(tiny_models["llama"]) in flat and str(tiny_models["qwen3"]) in flat


def test_summary_counts_and_html_diff():
    from app.eval.render import diff_spans
    from app.eval.result import Cell, Comparison, Row, Summary

    def cell(text, reward, correct, boiler=0.0):
        return Cell(text=text, reward=reward, correct=correct, tokens=1,
                    components={"length": 0.0, "format": 0.0, "reference": 0.0, "boilerplate": boiler})

    def row(b, a):
        return Row(prompt="p", reference=None, source="prompt", base=b, adapter=a)

    rows = [row(cell("a", 0.0, False), cell("b", 1.0, True)),
            row(cell("a", 0.5, True), cell("a", 0.5, True)),
            row(cell("As an AI", 1.0, None, -1.0), cell("c", 0.2, None))]
    c = Comparison.of(rows, {"seed": 0})
    assert Comparison.from_dict(json.loads(json.dumps(c.to_dict()))) == c  # compare.json reads back whole
    s = c.to_dict()["summary"]
    assert Summary.of(rows) == c.summary
    assert (s["wins"], s["ties"], s["losses"]) == (1, 1, 1)
    assert s["base"]["accuracy"] == 0.5 and s["adapter"]["accuracy"] == 1.0 and s["base"]["n_judged"] == 2
    assert s["base"]["boilerplate_rate"] == pytest.approx(1 / 3) and s["adapter"]["boilerplate_rate"] == 0.0

    left, right = diff_spans("The answer is <b>5</b>.", "The answer is 7.")
    assert left.startswith("The answer is ") and '<span class="onlybase">&lt;b&gt;5&lt;/b&gt;.</span>' in left
    assert '<span class="onlyadapter">7.</span>' in right and "<b>" not in left


def test_verdicts_need_a_change_in_correctness_or_a_real_reward_difference():
    """Two wrong answers a thousandth apart (the length component) are a tie, not a green 'win'; a fixed answer
    wins even when its reward is a little lower; accuracy moves in percentage points."""
    from app.eval.render import summary_rows
    from app.eval.result import REWARD_TOLERANCE, Cell, Comparison, Row

    def row(b, a, bc=False, ac=False):
        mk = lambda r, c: Cell(text="x", reward=r, correct=c, tokens=1, components={})  # noqa: E731
        return Row(prompt="p", reference="1", source="heldout", base=mk(b, bc), adapter=mk(a, ac))

    assert row(0.500, 0.501).verdict == "tie"  # both wrong, length noise
    assert row(0.5, 0.5 + 2 * REWARD_TOLERANCE).verdict == "win"
    assert row(0.5, 0.5 - 2 * REWARD_TOLERANCE).verdict == "loss"
    assert row(2.6, 2.59, bc=False, ac=True).verdict == "win"  # correctness decides over a small reward dip
    assert row(2.6, 2.7, bc=True, ac=False).verdict == "loss"
    c = Comparison.of([row(0.5, 0.501), row(0.5, 2.5, ac=True)], {})
    [acc] = [r for r in summary_rows(c.summary) if r[0].startswith("accuracy")]
    assert acc[1:] == ("0.0%", "50.0%", "+50.0 pts")


def test_base_model_is_found_from_run_checkpoint_or_bare_adapter(run_dir, adapter_dir, tiny_models, tmp_path):
    import shutil

    from app.model.pair import find_target

    def resolve_target(path, model=None):
        t = find_target(path, model)
        return t.adapter_dir, t.run_cfg, t.base, t.trained_on

    qwen3 = str(tiny_models["qwen3"])
    ck = run_dir / "checkpoints" / "checkpoint-3"
    shutil.copytree(adapter_dir, ck)
    for path in (run_dir, run_dir / "adapter", ck):
        found, cfg, mc, trained_on = resolve_target(path)
        assert cfg is not None and cfg.data.system_prompt == SYSTEM, path
        assert mc.name_or_path == qwen3 == trained_on and mc.load_in_4bit
    assert resolve_target(run_dir, model=qwen3)[2].name_or_path == qwen3  # naming the right base is fine
    found, cfg, mc, trained_on = resolve_target(adapter_dir)  # no run around it: adapter_config.json says
    assert cfg is None and found == adapter_dir and mc.name_or_path == qwen3
    with pytest.raises(UserError, match="--num-samples needs a dataset"):
        from app.eval.compare import run_comparison

        run_comparison(adapter_dir, num_samples=3)


def test_a_quick_compare_keeps_the_proof_and_never_counts_typed_prompts(run_dir):
    """The run's proof (RUN/compare.json, written as training ended) is what runs, the UI and the card show: a quick
    `compare RUN --num-samples 3 --prompt ...` goes to a file of its own, and its typed prompt (no reference) is shown
    but not counted in the held-out figures. Every figure says how many held-out rows are behind it."""
    from app.eval.compare import run_comparison
    from app.run import layout, proof
    from app.run.summary import run_summary

    first = run_comparison(run_dir, num_samples=6, max_new_tokens=6, record="proof")
    kept = (run_dir / layout.COMPARE_JSON).read_text()
    quick = run_comparison(run_dir, num_samples=3, prompts=["Tell me a story."], max_new_tokens=6)
    assert (run_dir / layout.COMPARE_JSON).read_text() == kept  # the proof is untouched
    (adhoc,) = proof.comparisons(run_dir)
    assert json.loads(adhoc.read_text())["summary"]["n"] == 3
    s = quick.summary
    assert s.n == 3 and s.heldout and s.prompts == 1 and s.base.n_judged == 3  # the prompt is not in the figures
    assert [r.source for r in quick.rows].count("prompt") == 1
    assert run_summary(run_dir)["comparison"].endswith(f"on {first.summary.n} held-out rows")
    prompts_only = run_comparison(run_dir, prompts=["Tell me a story."], max_new_tokens=4, record=None)
    assert not prompts_only.summary.heldout and prompts_only.summary.n == 1


def test_accuracy_follows_the_runs_reference_match_and_says_what_correct_means():
    """A support-QA run matched by overlap: a paraphrase (ROUGE-L 0.8) is right, as its reward counts it, not wrong
    because it is not the reference word for word; the table says what "correct" means; numbers stay numbers."""
    from app.config.schema import RewardConfig
    from app.eval.compare import correct_when, score_cell
    from app.eval.render import summary_rows
    from app.eval.result import Comparison, Row

    ref = "Restart the router, then sign in again with your new password."
    para = "Final answer: restart your router and then sign in again with the new password."
    off = "Final answer: our office hours are nine to five."
    overlap = RewardConfig(reference_match="overlap")
    cells = [score_cell({"text": t, "tokens": 10}, ref, overlap) for t in (off, para)]
    assert [c.correct for c in cells] == [False, True]
    numeric = RewardConfig(reference_match="numeric")
    assert score_cell({"text": para, "tokens": 10}, ref, numeric).correct is False  # exact text under numeric
    assert score_cell({"text": "Final answer: 1,000", "tokens": 3}, "#### 1000", numeric).correct is True

    result = Comparison.of([Row(prompt="How do I reconnect?", reference=ref, source="heldout", base=cells[0],
                                adapter=cells[1])], {})
    result.summary.correct_when = correct_when(overlap, [ref])
    again = Comparison.from_dict(result.to_dict())  # compare.json keeps it
    (label, base, adapter, delta), *_ = summary_rows(again.summary)
    assert label == "accuracy (1 with reference; scored by overlap: ROUGE-L F1 with the reference >= 0.5)"
    assert (base, adapter, delta) == ("0.0%", "100.0%", "+100.0 pts")
    assert correct_when(None, ["#### 42"]) == "numeric: final answer = reference (as numbers)"  # auto, per reference


def test_a_base_that_already_scores_near_100_percent_is_said():
    """A proof whose base answers 95% or more of 10+ rows right says it has no room to show a lift, and how answers
    were scored (terminal, page, the UI's summary); a base at 80% says nothing."""
    from app.config.schema import RewardConfig
    from app.eval.compare import correct_when, score_cell
    from app.eval.render import ceiling_line, page_html, summary_markdown
    from app.eval.result import Comparison, Row

    overlap = RewardConfig(reference_match="overlap")
    ref = "20 - 16 = 4. So the answer is 4."

    def proof(right: int):
        rows = [Row(prompt=f"q{i}", reference=ref, source="heldout",
                    base=score_cell({"text": ref if i < right else "no idea", "tokens": 5}, ref, overlap),
                    adapter=score_cell({"text": ref, "tokens": 5}, ref, overlap)) for i in range(20)]
        c = Comparison.of(rows, {})
        c.summary.correct_when = correct_when(overlap, [ref])
        return c

    full = proof(20)
    line = ceiling_line(full.summary)
    assert line.startswith("note: the base already answers 100% of these 20 rows right (scored by overlap")
    assert line in summary_markdown(full) and "no room to show a lift" in page_html(full)
    assert ceiling_line(proof(16).summary) is None


def test_the_proof_reads_the_teachers_decisions_from_the_run(monkeypatch):
    """The teacher's head rows and its system prompt are the plan's, read from status.json's record: the proof
    neither reads the model's config again nor applies the rule again (either would fail this test)."""
    from types import SimpleNamespace

    import app.eval.compare as C
    from app.config.schema import AppConfig

    seen = {}
    monkeypatch.setattr(C, "find_teacher", lambda *a, **k: SimpleNamespace(label="run t", config={"vocab_size": 9},
                                                                            outside=None))
    monkeypatch.setattr(C, "read_config", lambda *a, **k: pytest.fail("the student's config read again"))
    monkeypatch.setattr(C, "teacher_system", lambda *a, **k: pytest.fail("the system prompt decided again"))

    def load_teacher(source, where, local_only, keep, device="auto"):
        seen["keep"] = keep
        return object()

    class Asker:
        def __init__(self, *a, **k):
            pass

        def answers(self, items, **gen):
            seen["items"] = items
            return [{"text": "x", "tokens": 1}] * len(items)

    monkeypatch.setattr(C, "load_teacher", load_teacher)
    monkeypatch.setattr(C, "Asker", Asker)
    run_cfg = AppConfig.model_validate({"method": "distill", "distill": {"teacher": "t"},
                                        "data": {"dataset": "arith", "system_prompt": "S"}})
    items = [{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], "plain": "S\n\nq"}]
    out, label = C.teacher_side(run_cfg, items, None, {}, True, {"head_rows_kept": 128, "system_prompt": "T"})
    assert seen["keep"] == 128 and seen["items"][0]["messages"][0] == {"role": "system", "content": "T"}
    assert seen["items"][0]["plain"] == "T\n\nq" and label == "run t (asked with its system prompt 'T')"
