"""A run on images, planned and trained: the plan loads the vision-language model whole (model.images, recorded with
its reason), counts the vision side's 16-bit weights and each row's image tokens, turns packing off, and refuses a
model that reads no images or a method that cannot train on them yet, in one line, before any run folder exists.
The end-to-end run: QLoRA SFT with images, its held-out points and its proof asked with the same images."""

import json
import subprocess
import sys

import pytest
from PIL import Image

from app.config.build import build_config
from app.run import layout, store
from app.train.plan import make_plan


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_dry_run_says_the_image_tokens_and_the_vision_side(tiny_vlm, tmp_path):
    r = _cli("train", "--model", str(tiny_vlm), "--dataset", "shapes", "--method", "sft", "--dry-run",
             "--output-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = " ".join(r.stdout.split())
    assert "images: column 'image', 1 per row, 4 tokens each" in out
    assert "model.vision_tower" in out and "stays 16-bit" in out and "packing is off" in out
    assert not (tmp_path / "runs").exists()


def test_the_plan_counts_image_tokens_and_the_vision_weights(tiny_vlm):
    from app.data.loading import build_splits

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(tiny_vlm)}, "data": {"dataset": "shapes"},
                        "runtime": {"local_only": True, "device": "cpu"}})
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    plan = make_plan(cfg, train, det, offline=True)
    assert plan.cfg.model.images is True and plan.cfg.training.packing is False
    assert any(a.key == "model.images" and "images: column 'image'" in a.reason for a in plan.adjustments)
    v = plan.vision
    assert v.tokens_per_image == 4 and v.per_row == (1, 1) and v.tower_params > 0
    text_only = make_plan(cfg, train.remove_columns(["image", "images"]), _text_det(det), offline=True)
    # every row is its text plus one image's tokens; the weights gain the tower's in 16-bit
    assert [a - b for a, b in zip(plan.lengths, text_only.lengths)] == [4] * len(plan.lengths)
    assert plan.estimate["params"] == text_only.estimate["params"] + v.tower_params
    assert plan.estimate["weights_gb"] > text_only.estimate["weights_gb"]


def _text_det(det):
    from dataclasses import replace

    return replace(det, image_field=None, images_per_row=None)


@pytest.mark.parametrize("case", ["text model", "grpo", "images off"])
def test_a_run_that_cannot_read_the_images_is_one_line_and_no_folder(tiny_vlm, tiny_model, tmp_path, case):
    model = str(tiny_model if case == "text model" else tiny_vlm)
    extra = {"grpo": ["--method", "grpo"], "images off": ["--set", "model.images=false"]}.get(case, [])
    args = ["train", "--model", model, "--dataset", "shapes", "--output-dir", str(tmp_path / "runs"),
            "--set", "training.max_steps=1", "--local-only"]
    r = _cli(*args, *(extra or ["--method", "sft"]), cwd=tmp_path)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr and "images" in line
    assert {"text model": "reads none", "grpo": "does not train on images yet",
            "images off": "model.images is false"}[case] in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_sft_on_images_end_to_end_from_a_jsonl_of_image_files(tiny_vlm, tmp_path):
    colors = ["red", "green", "blue", "yellow"]
    rows = []
    for i in range(48):
        c = colors[i % 4]
        Image.new("RGB", (20, 20), c).save(tmp_path / f"{i}.png")
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
    adapter_cfg = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert "language_model" in adapter_cfg["target_modules"]
    evals = [m for m in store.read_metrics(run) if layout.EVAL_ACCURACY in m]
    assert [m["step"] for m in evals] == [3, 6]
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert len(proof["rows"]) == 6 and all(row["base"]["text"] is not None for row in proof["rows"])
    # compare RUN afterwards reads the run's images again, base and adapter on the same pictures
    c = _cli("compare", str(run), "--num-samples", "4", "--json", "c.json", "--local-only", cwd=tmp_path)
    assert c.returncode == 0, c.stderr[-2000:]
    assert len(json.loads((tmp_path / "c.json").read_text())["rows"]) == 4
