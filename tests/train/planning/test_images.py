"""A run on images, planned and trained: the plan loads the vision-language model whole (model.images, recorded with
its reason), counts the vision side's 16-bit weights and each row's image tokens, turns packing off, and refuses a
model that reads no images or a method that cannot train on them yet, in one line, before any run folder exists.
The end-to-end run: QLoRA SFT with images, its held-out points and its proof asked with the same images."""

import json
from pathlib import Path

import pytest
from conftest import cli as _cli
from conftest import cli_here
from PIL import Image

from app.config.build import build_config
from app.errors import UserError
from app.run import layout, store
from app.train.planning.plan import make_plan


def test_dry_run_says_the_image_tokens_and_the_vision_side(tiny_vlm, tmp_path):
    r = cli_here("train", "--model", str(tiny_vlm), "--dataset", "shapes", "--method", "sft", "--dry-run",
             "--output-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = " ".join(r.stdout.split())
    assert "images: column 'image', 1 per row, 4 tokens each" in out
    assert "model.vision_tower" in out and "stays 16-bit" in out and "packing is off" in out
    assert "rows are never cut" in out and "training.max_length" not in out  # nothing to cut them to
    assert not (tmp_path / "runs").exists()


def test_the_plan_counts_image_tokens_and_the_vision_weights(tiny_vlm):
    from app.data.splits import build_splits

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(tiny_vlm)}, "data": {"dataset": "shapes"},
                        "runtime": {"local_only": True, "device": "cpu"}})
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    plan = make_plan(cfg, train, det, offline=True)
    assert plan.cfg.model.images is True and plan.cfg.training.packing is False
    assert any(a.key == "model.images" and "images: column 'image'" in a.reason for a in plan.adjustments)
    # one planning step set both keys: said once, whole in config.yaml, its first clause at the end of the run
    [step] = [line for line in plan.config_yaml().splitlines() if "model.images" in line]
    assert step.startswith("# model.images: null -> true, training.packing: null -> false (images: column 'image'")
    assert step.count("images: column 'image'") == 1 and "packing would cut image tokens apart" in step
    assert plan.config_yaml().count("images: column 'image'") == 1
    [brief] = [line for line in plan.status_fields()["adjustments"] if "model.images" in line]
    assert brief == ("model.images: null -> true, training.packing: null -> false (images: column 'image', 1 per "
                     "row, 4 tokens each (the processor, for a 48x48 image))")
    v = plan.vision
    assert v.tokens_per_image == 4 and v.per_row == (1, 1) and v.tower_params > 0
    text_only = make_plan(cfg, train.remove_columns(["image", "images"]), _text_det(det), offline=True)
    # every row is its text plus one image's tokens; the weights gain the tower's in 16-bit
    assert [a - b for a, b in zip(plan.lengths, text_only.lengths)] == [4] * len(plan.lengths)
    assert plan.estimate["params"] == text_only.estimate["params"] + v.tower_params
    assert plan.estimate["weights_gb"] > text_only.estimate["weights_gb"]


def test_the_load_reads_the_plans_vision_side_and_processor(tiny_vlm, monkeypatch):
    """The modules kept 16-bit and the processor are the plan's: loading the planned run builds no second
    meta-device shell and loads no second processor (each would fail this test), and the model it loads keeps
    exactly those modules out of 4-bit."""
    import app.model.load as load
    from app.data.splits import build_splits
    from app.train.running.build import load_model

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(tiny_vlm)}, "data": {"dataset": "shapes"},
                        "runtime": {"local_only": True, "device": "cpu"}})
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    plan = make_plan(cfg, train, det)
    assert plan.vision.kept_16bit and plan.vision.processor is not None
    monkeypatch.setattr(load, "meta_model", lambda *a, **k: pytest.fail("the shell built again at load"))
    monkeypatch.setattr(load, "load_processor", lambda *a, **k: pytest.fail("the processor loaded again"))
    loaded = load_model(plan)
    assert loaded.processor is plan.vision.processor
    tower = loaded.model.get_submodule(plan.vision.kept_16bit[0])
    assert not any("4bit" in type(m).__name__ for m in tower.modules())  # the plan's modules stayed 16-bit


def _text_det(det):
    from dataclasses import replace

    return replace(det, image_field=None, images_per_row=None)


@pytest.mark.parametrize("case", ["text model", "orpo", "images off", "grpo with tools"])
def test_a_run_that_cannot_read_the_images_is_one_line_and_no_folder(tiny_vlm, tiny_model, tmp_path, case):
    model = str(tiny_model if case == "text model" else tiny_vlm)
    extra = {"orpo": ["--method", "orpo"], "images off": ["--set", "model.images=false"],
             "grpo with tools": ["--method", "grpo", "--set", "tools.use=[calculator]"]}.get(case, [])
    data = "shapes"
    if case == "orpo":  # preference pairs with pictures
        for i in range(8):
            Image.new("RGB", (8, 8), "red").save(tmp_path / f"{i}.png")
        data = str(tmp_path / "prefs.jsonl")
        Path(data).write_text("".join(json.dumps({"prompt": "Color?", "chosen": "red", "rejected": "blue",
                                                  "image": f"{i}.png"}) + "\n" for i in range(8)))
    args = ["train", "--model", model, "--dataset", data, "--output-dir", str(tmp_path / "runs"),
            "--set", "training.max_steps=1", "--local-only"]
    r = cli_here(*args, *(extra or ["--method", "sft"]), cwd=tmp_path)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr and "images" in line
    assert {"text model": "reads none", "orpo": "does not train on images yet",
            "images off": "model.images is false", "grpo with tools": "cannot call tools yet"}[case] in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _one_of_its_kind(color: str, i: int):
    """A 20x20 picture of ``color`` with one pixel its own: the same question about a byte-identical picture is the
    same row, which the leak check (app/data/leaks.py) would rightly leave out of the held-out rows."""
    img = Image.new("RGB", (20, 20), color)
    img.putpixel((i % 20, i // 20), (i * 5 % 256, 128, 255 - i * 5 % 256))
    return img


@pytest.mark.slow
def test_sft_on_images_end_to_end_from_a_jsonl_of_image_files(tiny_vlm, tmp_path):
    colors = ["red", "green", "blue", "yellow"]
    rows = []
    for i in range(48):
        c = colors[i % 4]
        _one_of_its_kind(c, i).save(tmp_path / f"{i}.png")
        rows.append({"question": "What color is the picture?", "answer": c, "image": f"{i}.png"})
    (tmp_path / "pics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _cli("train", "--model", str(tiny_vlm), "--dataset", "pics.jsonl", "--method", "sft", "--output-dir", "runs",
             "--set", "training.max_steps=6", "--set", "training.per_device_train_batch_size=4",
             "--set", "training.proof_rows=6", "--set", "training.eval_every=3", "--set", "training.eval_rows=4",
             "--set", "training.save_steps=3", "--local-only", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert (store.read_status(run) or {}).get("status") == layout.FINISHED
    cfg = (run / layout.CONFIG).read_text()
    assert "model.images: null -> true" in cfg and "images: true" in cfg
    assert (store.read_status(run) or {})[layout.VISION]["kept_16bit"][:1] == ["model.vision_tower"]
    card = (run / "adapter" / "README.md").read_text()
    assert "image-text-to-text" in card and "sees 1 image(s) per prompt (column `image`, 4 tokens each)" in card
    adapter_cfg = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert "language_model" in adapter_cfg["target_modules"]
    evals = [m for m in store.read_metrics(run) if layout.EVAL_ACCURACY in m]
    assert [m["step"] for m in evals] == [3, 6]
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert len(proof["rows"]) == 6 and all(row["base"]["text"] is not None for row in proof["rows"])
    # compare RUN afterwards reads the run's images again, base and adapter on the same pictures
    c = _cli("compare", str(run), "--num-samples", "4", "--json", "c.json", "--html", "c.html", "--local-only",
             cwd=tmp_path)
    assert c.returncode == 0, c.stderr[-2000:]
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert len(rows) == 4 and all(len(r["images"]) == 1 and r["images"][0].startswith("data:image/png;base64,")
                                  for r in rows)
    page = (tmp_path / "c.html").read_text()
    assert page.count('<img class="pic" src="data:image/png;base64,') == 4  # each row's picture beside its answers


@pytest.mark.slow
def test_dpo_on_images_end_to_end_with_held_out_pairs_read_with_their_images(tiny_vlm, tmp_path):
    colors = ["red", "green", "blue", "yellow"]
    rows = []
    for i in range(40):
        c, other = colors[i % 4], colors[(i + 1) % 4]
        _one_of_its_kind(c, i).save(tmp_path / f"{i}.png")
        rows.append({"prompt": "What color is the picture?", "chosen": c, "rejected": other, "image": f"{i}.png"})
    (tmp_path / "prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _cli("train", "--model", str(tiny_vlm), "--dataset", "prefs.jsonl", "--method", "dpo", "--output-dir", "runs",
             "--set", "training.max_steps=4", "--set", "training.per_device_train_batch_size=4",
             "--set", "training.proof_rows=6", "--set", "training.eval_every=2", "--set", "training.eval_rows=4",
             "--local-only", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert (store.read_status(run) or {}).get("status") == layout.FINISHED
    assert "images: true" in (run / layout.CONFIG).read_text()
    evals = [m for m in store.read_metrics(run) if layout.EVAL_PREF_ACCURACY in m]
    assert [m["step"] for m in evals] == [2, 4]
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert proof["preference"]["n"] == 6 and len(proof["rows"]) == 6


def test_held_out_pairs_with_images_are_scored_with_them():
    """The same answer is likelier with one picture than another: the log-probabilities read the images (the image
    demo's pretrained base: a random tiny Gemma 3 starts with a zero projector and ignores its pictures)."""
    from app.config.builtin import VISION_MODEL, builtin_model_path
    from app.config.schema import ModelConfig
    from app.ask.asking import Asker
    from app.model.load import load_base_model

    model, tok, info = load_base_model(ModelConfig(name_or_path=str(builtin_model_path(VISION_MODEL))),
                                       local_only=True, for_training=False, device="cpu", images=True)
    item = {"messages": [{"role": "user", "content": "What color is the picture?"}], "pair": ("red", "blue")}
    red, blue = (Image.new("RGB", (20, 20), c) for c in ("red", "blue"))
    asker = Asker(model, tok, info["processor"])
    [with_red] = asker.logprobs([{**item, "images": [red]}])
    [with_blue] = asker.logprobs([{**item, "images": [blue]}])
    assert with_red != with_blue and all(x < 0 for x in with_red + with_blue)
    with pytest.raises(UserError, match="reads no images"):  # the same pictures asked of a model without a processor
        Asker(model, tok).logprobs([{**item, "images": [red]}])


@pytest.mark.slow
def test_grpo_on_images_samples_with_the_pictures_and_proves_with_them(tiny_vlm, tmp_path):
    r = _cli("train", "--model", str(tiny_vlm), "--dataset", "shapes", "--method", "grpo", "--output-dir", "runs",
             "--set", "training.max_steps=2", "--set", "grpo.num_generations=2",
             "--set", "grpo.max_completion_length=4",
             "--set", "training.proof_rows=4", "--set", "data.max_samples=16", "--set", "training.eval_every=0",
             "--local-only", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    rewarded = [m for m in store.read_metrics(run) if "rewards/reference/mean" in m]
    assert rewarded and all(m["completions/mean_length"] > 0 for m in rewarded)
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert len(proof["rows"]) == 4 and all(len(row["images"]) == 1 for row in proof["rows"])


def test_a_row_whose_images_outgrow_the_context_is_one_line(tiny_vlm, tmp_path):
    for i in range(140):
        Image.new("RGB", (4, 4), "red").save(tmp_path / f"{i}.png")
    rows = [{"question": "How many squares?", "answer": "many", "images": [f"{i}.png" for i in range(k)]}
            for k in (1, 2, 140, 3, 1, 2, 1, 1, 2, 1)]
    (tmp_path / "many.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli_here("train", "--model", str(tiny_vlm), "--dataset", "many.jsonl", "--method", "sft", "--dry-run",
             "--output-dir", "runs", "--local-only", cwd=tmp_path)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    said = " ".join(r.stderr.split())  # one line, wrapped by the terminal's width
    assert "140 image(s) of 4 tokens" in said and "512-token context" in said and "Traceback" not in r.stderr


def _pictures(folder: Path, side: int, n: int = 40) -> Path:
    """``n`` rows of JPEG pictures ``side`` pixels square (smooth gradients: small on disk, large decoded)."""
    import numpy as np

    folder.mkdir()
    ramp = np.linspace(0, 255, side, dtype=np.uint8)
    rows = []
    for i in range(n):
        pixels = np.stack([np.tile(ramp, (side, 1)), np.tile(ramp[:, None], (1, side)),
                           np.full((side, side), i * 5 % 256, np.uint8)], -1)
        Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=80)
        rows.append({"image": f"{i}.jpg", "question": "Which colour is the corner?", "answer": "red"})
    (folder / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return folder / "data.jsonl"


def _peak_rss_mb(*args) -> tuple[int, str]:
    """(the peak resident memory in MB of `qlora-app ARGS` in a process of its own, what it printed)."""
    import subprocess
    import sys

    from repo_paths import ROOT

    code = ("import resource, runpy, sys\nsys.argv = ['qlora-app', *sys.argv[1:]]\ntry:\n"
            "    runpy.run_module('app.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    kb = int(r.stdout.rsplit("MAXRSS", 1)[1])
    return kb // 1024, r.stdout + r.stderr


def test_large_pictures_are_never_all_decoded_and_the_plan_says_what_they_take(tiny_vlm, tmp_path):
    """40 rows of 2400x2400 photos (17 MB each decoded, 700 MB together) planned as 40 small ones are: the
    conversions and the plan's checks read them as stored (before: every picture of a writer batch decoded at once,
    a dry run of 60 3000x3000 JPEGs peaked at 2.25 GB against 0.53 GB); the plan says their size as stored and
    decoded."""
    small, _ = _peak_rss_mb("train", "--model", tiny_vlm, "--dataset", _pictures(tmp_path / "small", 32),
                            "--method", "sft", "--dry-run", "--local-only")
    large, out = _peak_rss_mb("train", "--model", tiny_vlm, "--dataset", _pictures(tmp_path / "large", 2400),
                              "--method", "sft", "--dry-run", "--local-only")
    assert large - small < 150, (small, large)  # measured: 560 vs 533
    said = " ".join(out.split())
    assert "training picture(s)" in said and "MB as stored, held as stored and decoded a batch at a time" in said
    assert "(the largest sampled, 2400x2400, is 17.3 MB decoded;" in said
