"""export (adapter / merged / gguf / ollama), its model card, push, and the GGUF checked against a real llama.cpp
(llama-cpp-python, in the dev extra): the same greedy tokens as transformers on the merged model."""

import json
from pathlib import Path

import pytest
from conftest import cli_here

from app.errors import UserError
from app.run import layout, proof, store


@pytest.fixture(scope="module")
def bare_run(tiny_models, tmp_path_factory, math_jsonl_module):
    """A run directory around a random (non-zero) adapter on the Llama fixture: fast to make, real to export."""
    from fakes import make_adapter, write_run

    root = tmp_path_factory.mktemp("bare")
    return write_run(root / "run", tiny_models["llama"], make_adapter(tiny_models["llama"], root / "a"),
                     math_jsonl_module)


@pytest.fixture(scope="module")
def math_jsonl_module(tmp_path_factory):
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(12) for b in range(3)]
    p = tmp_path_factory.mktemp("data") / "math.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


# ---------------------------------------------------------------------------------------------- requests


def test_bad_requests_are_one_line_and_keep_what_exists(bare_run, tmp_path):
    from app.export.bundle import export_run

    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match=r"is not empty \(an earlier export\?\); add --force to replace"):
        export_run(bare_run, full)
    assert (full / "keep.txt").read_text() == "mine" and len(list(full.iterdir())) == 1
    with pytest.raises(UserError, match="--format tgz is not one of adapter, merged, gguf, gguf-lora, ollama"):
        export_run(bare_run, tmp_path / "x", fmt="tgz")
    with pytest.raises(UserError, match="--outtype q4 is not one of q4_k_m, "):
        export_run(bare_run, tmp_path / "x", fmt="gguf", outtype="q4")
    # a run with no adapter yet: says why (running at step 3) and what to do
    pending = tmp_path / "pending"
    pending.mkdir()
    (pending / layout.CONFIG).write_text((bare_run / layout.CONFIG).read_text())
    store.write_status(pending, layout.RUNNING, step=3)
    with pytest.raises(UserError, match=r"has no adapter yet \(running at step 3\); wait for it to finish"):
        export_run(pending, tmp_path / "x")
    # --force writes into a full folder, replacing only its own names
    res = export_run(bare_run, full, force=True)
    assert (full / "keep.txt").read_text() == "mine" and (full / "adapter_model.safetensors").is_file()
    assert res.files["card"] == "README.md" and res.files["weights"] == "adapter_model.safetensors"
    assert not [p for p in tmp_path.iterdir() if ".export-" in p.name]  # no staging folder left
    merged = export_run(bare_run, tmp_path / "merged", fmt="merged")  # what the export reports names the weights
    assert merged.files["weights"] == "model.safetensors" and (merged.out / merged.files["weights"]).is_file()


def test_cli_errors_exit_2(bare_run, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "f").write_text("x")
    for args, msg in [(["export", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], "not found"),
                      (["export", str(bare_run), "--out", str(full)], "is not empty"),
                      (["export", str(bare_run), "--out", str(full / "f" / "sub")], "/f' is a file; pass a folder path"),
                      (["export", str(bare_run), "--out", str(tmp_path / "o"), "--merge", "--format", "gguf"],
                       "--merge means --format merged"),
                      (["push", str(bare_run), "--repo", "me/x", "--local-only"], "offline session"),
                      (["push", str(bare_run), "--repo", "not a repo"], "is not a hub repository id"),
                      (["chat", str(bare_run), "--json"], "--json goes with --message")]:
        r = cli_here(*args)
        assert r.returncode == 2, (args, r.stderr[-1500:])
        assert msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr[-1500:])
        assert len(r.stderr.strip().splitlines()) <= 3, r.stderr  # one line (wrapped at most)
    assert (full / "f").read_text() == "x"


def test_adapter_export_has_our_card_with_the_proof(bare_run, tmp_path):
    from app.export.bundle import export_run

    cmp = {"summary": {"base": {"accuracy": 0.25, "mean_reward": 0.5, "mean_tokens": 10.0},
                       "adapter": {"accuracy": 0.75, "mean_reward": 1.25, "mean_tokens": 12.0},
                       "wins": 6, "ties": 3, "losses": 1, "n": 10},
           "config": {"dataset": "math.jsonl", "greedy": True, "max_new_tokens": 48,
                      "adapter": str(bare_run / layout.ADAPTER)}, "rows": []}
    proof.write_proof(bare_run, cmp)
    out = export_run(bare_run, tmp_path / "a").out
    card = (out / "README.md").read_text()
    assert "[More Information Needed]" not in card  # PEFT's blank card is replaced
    front = card.split("---")[1]
    assert "library_name: peft" in front and "- qlora-app" in front and "- grpo" in front
    assert "base_model:" not in front  # a local folder is not a hub id
    assert "(a local model folder)" in card and str(bare_run.parent) not in card  # named, not its whole path
    assert "` (a local model folder)" in card and "(a local model folder)`" not in card  # the words outside the code
    assert "| base | 25.0% | 0.500 | 10.0 |" in card  # tokens as tokens, not 10.000
    assert "10 held-out rows of `math.jsonl`" in card
    assert "| base | 25.0% | 0.500 |" in card and "| adapter | 75.0% | 1.250 |" in card
    assert "6 wins, 3 ties, 1 losses (n = 10)" in card
    assert "learning rate" in card and "LoRA: r" in card
    # a checkpoint of the same run: its training facts, its own step, and not the final adapter's numbers
    import shutil

    ckpt = bare_run / layout.CHECKPOINTS / "checkpoint-3"
    shutil.copytree(bare_run / layout.ADAPTER, ckpt)
    card = (export_run(ckpt, tmp_path / "c").out / "README.md").read_text()
    assert "3 optimizer steps" in card and "LoRA: r" in card
    assert "No held-out comparison of this adapter is recorded" in card and "75.0%" not in card


def test_the_proof_is_kept_and_ad_hoc_comparisons_get_files_of_their_own(tmp_path):
    proof.write_proof(tmp_path, {"n": 1})
    for n in (2, 3):
        proof.add_comparison(tmp_path, {"n": n})
    assert proof.latest_proof(tmp_path) == {"n": 1}  # ad-hoc comparisons never replace it
    assert sorted(json.loads(p.read_text())["n"] for p in proof.comparisons(tmp_path)) == [2, 3]
    proof.write_proof(tmp_path, {"n": 4})  # an extended run's new proof: the old one is kept beside the others
    assert proof.latest_proof(tmp_path) == {"n": 4}
    assert {json.loads(p.read_text())["n"] for p in (tmp_path / layout.COMPARISONS).iterdir()} == {1, 2, 3}


def test_runs_show_and_the_ui_show_the_latest_comparison(bare_run):
    from rich.console import Console

    from app.cli.plan_report import print_run_summary
    from app.run.summary import run_summary
    from app.ui.run_view import status_markdown

    proof.write_proof(bare_run, {"summary": {"base": {"accuracy": 0.2}, "adapter": {"accuracy": 0.45},
                                             "wins": 30, "ties": 65, "losses": 5, "n": 100}})
    want = "accuracy base 20.0% -> adapter 45.0% (+25.0 pts), 30 wins / 65 ties / 5 losses, on 100 held-out rows"
    assert run_summary(bare_run)["comparison"] == want
    assert f"held-out comparison: {want}" in status_markdown(run_summary(bare_run))
    console = Console(record=True, width=300)
    print_run_summary(bare_run, console)
    assert want in console.export_text()


# ---------------------------------------------------------------------------------------------- push


def test_push_uploads_what_export_writes(bare_run, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    from app.export.push import push_run

    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("token", token))

        def create_repo(self, repo_id, private=None, exist_ok=False):
            calls.append(("create", repo_id, private, exist_ok))
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, repo_id, folder_path, commit_message=None):
            calls.append(("upload", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(UserError, match="no Hugging Face token found"):
        push_run(bare_run, "me/model")
    dry = push_run(bare_run, "me/model", dry_run=True)  # no token needed to look
    assert {n for n, _ in dry["files"]} >= {"README.md", "adapter_config.json", "adapter_model.safetensors"}
    assert not calls
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_x")
    res = push_run(bare_run, "me/model", private=True)
    assert calls[0] == ("token", "hf_x") and calls[1] == ("create", "me/model", True, True)
    assert calls[2][0] == "upload" and "README.md" in calls[2][2] and "adapter_model.safetensors" in calls[2][2]
    assert res["url"] == "https://huggingface.co/me/model"
    with pytest.raises(UserError, match="offline session"):
        push_run(bare_run, "me/model", local_only=True)


# ---------------------------------------------------------------------------------------------- GGUF in llama.cpp


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo recipe (shipped model, arith, shaped reward) for a few GRPO steps, its proof on 24 held-out rows."""
    from app.config.build import build_config
    from app.demo.recipe import base_model_path, grpo_preset
    from app.train.running.session import Session

    out = tmp_path_factory.mktemp("demo")
    cfg = build_config({**grpo_preset(base_model_path()), "output_dir": str(out), "run_name": "demo-grpo"},
                       sets=["training.max_steps=6", "training.seed=3", "logging_steps=1", "training.proof_rows=24"])
    return Session(cfg, progress=False).run()


# Logit gap (transformers, fp32 on the fp16 merge) below which two tokens are a tie that f16 rounding in llama.cpp
# may break the other way.
NEAR_TIE = 0.05


@pytest.fixture(scope="module")
def demo_ggufs(demo_run, tmp_path_factory):
    """The demo run exported for Ollama as f16 (the Modelfile's), Q4_K_M and Q8_0, from one merge."""
    from app.export.bundle import export_run

    return export_run(demo_run, tmp_path_factory.mktemp("ggufs") / "ollama", fmt="ollama", outtype="f16,q4_k_m,q8_0")


@pytest.mark.slow
def test_demo_gguf_answers_like_transformers_in_llama_cpp(demo_run, demo_ggufs, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    import torch
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.export.bundle import export_run
    from app.model.generation import format_prompt

    cmp = json.loads((demo_run / layout.COMPARE_JSON).read_text())  # the run's proof, written as training ended
    res = demo_ggufs
    gguf_file = res.out / res.files["gguf"]
    assert gguf_file.name.endswith("-f16.gguf")
    merged = export_run(demo_run, tmp_path / "merged", fmt="merged", dtype="fp16").out
    tok = AutoTokenizer.from_pretrained(merged)
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    llm = llama_cpp.Llama(model_path=str(gguf_file), n_ctx=256, n_threads=2, verbose=False)
    try:
        system = cmp["config"]["system_prompt"]
        same = 0
        for row in cmp["rows"]:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": row["prompt"]}]
            text = format_prompt(tok, {"messages": msgs, "plain": ""})
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids
            hf = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[0, len(ids):].tolist()
            hf = hf[:hf.index(tok.eos_token_id)] if tok.eos_token_id in hf else hf
            ours = []
            for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
                if t == llm.token_eos() or len(ours) == len(hf) + 1 or len(ours) >= 32:
                    break
                ours.append(t)
            if ours != hf:  # f16 GGUF vs transformers: only a near-tie in transformers' own logits may flip
                k = next(i for i in range(min(len(ours), len(hf)) + 1) if i >= len(ours) or i >= len(hf)
                         or ours[i] != hf[i])
                with torch.no_grad():
                    logits = model(torch.tensor([ids + hf[:k]])).logits[0, -1]
                pick = lambda seq: seq[k] if k < len(seq) else tok.eos_token_id  # noqa: E731
                gap = float(logits[pick(hf)] - logits[pick(ours)])
                assert gap < NEAR_TIE, f"llama.cpp chose a token {gap:.3f} below transformers' pick at {k}"
            same += ours == hf
        assert same >= len(cmp["rows"]) - 2, f"{same}/{len(cmp['rows'])} held-out prompts gave the same greedy tokens"
        # llama.cpp's chat completion renders the GGUF's embedded template as transformers renders the model's
        template = llm.metadata["tokenizer.chat_template"]
        rendered = Jinja2ChatFormatter(template=template, eos_token=tok.eos_token, bos_token=tok.bos_token)(
            messages=msgs).prompt
        assert rendered == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        reply = llm.create_chat_completion(messages=msgs, temperature=0.0, max_tokens=32)
        hf = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[0, len(ids):]
        assert reply["choices"][0]["message"]["content"].strip() == tok.decode(hf, skip_special_tokens=True).strip()
    finally:
        llm.close()
    # the Modelfile: FROM the file, a TEMPLATE, the run's SYSTEM, a stop for each end of turn
    mf = (res.out / "Modelfile").read_text()
    assert mf.startswith(f"FROM ./{gguf_file.name}\n")
    assert 'TEMPLATE """' in mf and "{{ .Content }}" in mf
    assert f'SYSTEM """{system}"""' in mf
    assert 'PARAMETER stop "</s>"' in mf and 'PARAMETER stop "<|user|>"' in mf
    assert res.ollama_command == f"ollama create demo-grpo -f {res.out / 'Modelfile'}"
    card = (res.out / "README.md").read_text()
    s = cmp["summary"]
    assert f"| adapter | {s['adapter']['accuracy']:.1%} |" in card and "library_name: gguf" in card
    assert (res.out / layout.CURVES).is_file() and "ollama create demo-grpo" in card
    assert sorted(p.name for p in res.out.iterdir()) == sorted(["Modelfile", "README.md", "curves.png",
                                                                 gguf_file.name, res.files["gguf-q4_k_m"],
                                                                 res.files["gguf-q8_0"]])


@pytest.mark.slow
def test_the_quantized_demo_ggufs_answer_like_the_f16_file(demo_run, demo_ggufs):
    """Q4_K_M and Q8_0 in llama.cpp against the f16 file, greedy, on the run's held-out problems: the same answers on
    most rows and the same accuracy within a few rows (docs/export.md has the measured figures: bench/bench_gguf.py)."""
    pytest.importorskip("llama_cpp")
    from llamacpp import greedy_answers
    from transformers import AutoTokenizer

    from app.demo.recipe import base_model_path
    from app.model.generation import format_prompt
    from app.rewards import match

    cmp = json.loads((demo_run / layout.COMPARE_JSON).read_text())
    res = demo_ggufs
    files = {"f16": res.files["gguf"], "q4_k_m": res.files["gguf-q4_k_m"], "q8_0": res.files["gguf-q8_0"]}
    tok = AutoTokenizer.from_pretrained(base_model_path())
    system = cmp["config"]["system_prompt"]
    prompts = [tok(format_prompt(tok, {"messages": [{"role": "system", "content": system},
                                                    {"role": "user", "content": row["prompt"]}], "plain": ""}),
                   add_special_tokens=False)["input_ids"] for row in cmp["rows"]]
    answers, right = {}, {}
    for t, name in files.items():  # each file in a llama.cpp child of its own
        answers[t] = [tok.decode(a, skip_special_tokens=True) for a in greedy_answers(res.out / name, prompts)]
        right[t] = sum(bool(match.correct(None, a, row["reference"])) for a, row in zip(answers[t], cmp["rows"]))
    n = len(cmp["rows"])
    same = {t: sum(a == b for a, b in zip(answers[t], answers["f16"])) for t in ("q4_k_m", "q8_0")}
    assert same["q8_0"] >= n - 2, same
    assert same["q4_k_m"] >= n // 2, same
    assert all(abs(right[t] - right["f16"]) <= max(2, n // 8) for t in ("q4_k_m", "q8_0")), right


@pytest.mark.slow
def test_every_exported_gguf_states_its_own_accuracy_on_the_proof_rows(demo_run, demo_ggufs):
    """The export asks each file it wrote the run's proof rows again (llama.cpp, greedy, as the proof asked the
    adapter): its accuracy and how many answers are the adapter's, in the export's notes, its card and the run's
    status.json. The f16 file (merged onto the weights the adapter was trained on) answers as the adapter did."""
    res = demo_ggufs
    cmp = json.loads((demo_run / layout.COMPARE_JSON).read_text())
    n = len(cmp["rows"])
    got = {m.artifact: m for m in res.measured}
    assert set(got) == {res.files["gguf"], res.files["gguf-q4_k_m"], res.files["gguf-q8_0"]}
    adapter = sum(bool(r["adapter"]["correct"]) for r in cmp["rows"]) / n
    assert all(m.n == n and m.adapter_accuracy == pytest.approx(adapter) for m in got.values())
    f16 = got[res.files["gguf"]]
    assert f16.same >= n - 1 and abs(f16.accuracy - adapter) <= 1 / n, f16  # f16 rounding may break a near tie
    card = (res.out / "README.md").read_text()
    assert "## What this export answers" in card and all(m.line() in card for m in got.values())
    assert all(m.line() in res.notes for m in got.values())
    assert not any("multi-token" in n for n in res.notes)  # the demo's base has none to leave out
    (recorded,) = [e for e in store.read_status(demo_run)[layout.EXPORTS] if e["out"] == str(res.out)]
    assert recorded["format"] == "ollama" and recorded["measured"] == [m.record() for m in res.measured]


@pytest.mark.slow
def test_the_merged_export_answers_as_its_adapter_and_says_so(demo_run, tmp_path):
    """Merged onto the weights the adapter was trained on (the default), in the run's own fp32: every greedy answer
    on the proof's rows is the adapter's; merged onto the base's own weights, the export says how many are not."""
    from app.export.bundle import export_run

    trained = export_run(demo_run, tmp_path / "trained", fmt="merged", dtype="fp32", measure_rows=12)
    (m,) = trained.measured
    assert m.artifact == "the merged model (trained)" and m.n == 12 and m.same == 12, m
    assert m.accuracy == pytest.approx(m.adapter_accuracy)
    card = (trained.out / "README.md").read_text()
    assert "whose layers are the NF4 weights the adapter was trained on, dequantized" in card and m.line() in card
    original = export_run(demo_run, tmp_path / "original", fmt="merged", dtype="fp32", measure_rows=12,
                          onto="original")
    assert "with the base's own weights (not the NF4 ones" in (original.out / "README.md").read_text()
    assert original.measured[0].n == 12 and original.measured[0].line() in original.notes
    none = export_run(demo_run, tmp_path / "none", fmt="merged", measure_rows=0)
    assert none.measured == [] and "## What this export answers" not in (none.out / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_fixture_architectures_agree_on_next_token(arch, tiny_models, tmp_path):
    """Qwen2 / Qwen3 with a random non-zero adapter: the GGUF (f32) loads in llama.cpp and picks the same next
    token as transformers on the merged model at every position of a few prompts."""
    llama_cpp = pytest.importorskip("llama_cpp")
    import torch
    from fakes import make_adapter
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.export.bundle import export_run

    adapter = make_adapter(tiny_models[arch], tmp_path / "adapter")
    res = export_run(adapter, tmp_path / "gguf", fmt="gguf", outtype="f32")
    merged = export_run(adapter, tmp_path / "merged", fmt="merged", dtype="fp32").out
    tok = AutoTokenizer.from_pretrained(merged)
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    llm = llama_cpp.Llama(model_path=str(res.out / res.files["gguf"]), n_ctx=128, logits_all=True, n_threads=2,
                          verbose=False)
    try:
        for text in ["Tom has 3 apples and buys 4 more.", "Answer: 7 + 2 = 9. Final answer: 9"]:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids
            llm.reset()
            llm.eval(ids)
            ours = torch.tensor(llm.scores[:len(ids)]).argmax(-1).tolist()
            with torch.inference_mode():
                theirs = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
            assert ours == theirs
    finally:
        llm.close()


@pytest.mark.slow
def test_full_disk_leaves_no_partial_file(demo_run, small_disk):
    import shutil

    from app.export.bundle import export_run

    out = small_disk / "out"
    filler = small_disk / "filler"
    free = shutil.disk_usage(small_disk).free
    with open(filler, "wb") as f:  # leave ~600 KB: the tokenizer fits, the 1.4 MB of weights do not
        f.write(b"\0" * max(0, free - 600_000))
    with pytest.raises(UserError, match="the disk filled up while exporting"):
        export_run(demo_run, out, fmt="gguf")
    assert not out.exists() or not any(out.iterdir())
    assert [p.name for p in small_disk.iterdir()] == ["filler"] or sorted(p.name for p in small_disk.iterdir()) \
        == ["filler", "out"]


def test_a_merge_onto_what_does_not_exist_is_one_line(tmp_path):
    from conftest import cli_here

    r = cli_here("export", tmp_path / "no-run-needed", "--format", "merged", "--merge-onto", "int8",
                 "--out", tmp_path / "out")
    assert r.returncode == 2 and "--merge-onto int8 is not one of trained, original" in " ".join(r.stderr.split())
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_export_whose_measurement_fails_stands_and_says_it_was_not_measured(demo_run, tmp_path, monkeypatch):
    """llama.cpp dying while it answers the proof rows (an illegal instruction, memory) leaves the exported files in
    place and the export says, in one line, that they were not measured."""
    from app.export import measure
    from app.export.bundle import export_run
    from app.export.llamacpp import LlamaCppDied

    def dies(*a, **k):
        raise LlamaCppDied("llama.cpp died answering with x.gguf (SIGILL: an illegal instruction)")

    monkeypatch.setattr(measure, "measure_gguf", dies)
    res = export_run(demo_run, tmp_path / "gguf", fmt="gguf", outtype="f16", measure_rows=4)
    assert (res.out / res.files["gguf"]).is_file() and res.measured == []
    assert "not measured: llama.cpp died answering with x.gguf (SIGILL: an illegal instruction)" in res.notes
