"""The memory estimate against torch's measured peak on a real GPU: the table issue #32 measured on one H100 (main
e84331d, 2026-11-24), kept here as data with its configs, re-planned through `train --dry-run --gpu-memory 80 --json`
on models of the same shapes (config and tokenizer; planning reads no weights)."""

import json
import sys

import pytest
from conftest import cli
from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import shapes  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not shapes.GSM8K.is_file(),
                                                   reason="../shared/data/gsm8k_train.jsonl is not beside the project")]

# The measured runs' flags (everything else default: GRPO's sampler auto, which the plan resolved to the merged
# 16-bit copy; SFT's default max_length).
FLAGS = ["--local-only", "--set", "lora.r=16", "--set", "lora.alpha=32", "--set", "per_device_train_batch_size=8",
         "--set", "gradient_accumulation_steps=1", "--set", "grpo.num_generations=8", "--set",
         "grpo.max_completion_length=256", "--set", "learning_rate=1e-5", "--set", "training.eval_every=0",
         "--max-steps", "4"]
# shape, method, torch's peak reserved (GiB), what else the run really had. The SFT runs asked for the default
# packing, but trained unpacked: main e84331d measured packing on the loaded model against a fixed 2 % tolerance
# that bf16 kernels exceed (fixed since: app.model.load.packed_examples_stay_apart), and 8 packed 1024-token rows could
# not fit the 7B run's 4.78 GiB (4-bit weights 3.5 GiB + their checkpointed layer inputs alone 1.5 GiB).
MEASURED = [
    ("0.5b", "sft", 0.82, ["--set", "training.packing=false"]),
    ("7b", "sft", 4.78, ["--set", "training.packing=false"]),
    ("0.5b", "grpo", 1.62, []),
    ("7b", "grpo", 17.27, []),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return {s: shapes.write_shape(root / s, s, root / "tokenizer") for s in ("0.5b", "7b")}


def _dry_run(model, method, extra=()):
    r = cli("train", "--dataset", str(shapes.GSM8K), "--model", str(model), "--method", method, *FLAGS, *extra,
            "--dry-run", "--gpu-memory", "80", "--json", timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("shape, method, measured, extra", MEASURED, ids=[f"{s}-{m}" for s, m, *_ in MEASURED])
def test_the_estimate_is_within_20_percent_of_the_measured_peak(models, shape, method, measured, extra):
    plan = _dry_run(models[shape], method, extra)
    assert plan["refused"] is None and plan["device"] == "an 80 GB CUDA GPU (planned)"
    assert 0.8 <= plan["torch_peak_gb"] / measured <= 1.2, (plan["torch_peak_gb"], measured)
    # the card holds the CUDA context and the paged optimizer states beside torch's pool
    est = plan["estimate"]
    assert plan["total_gb"] - plan["torch_peak_gb"] == pytest.approx(est["overhead_gb"] + est["paged_gb"], abs=1e-6)
    assert est["paged_gb"] > 0 if shape == "7b" else est["paged_gb"] == 0  # 7B's LoRA B matrices: >= 1e5 elements
    if method == "grpo":  # the decisions the estimate is made of, as the plan took them on that card
        assert plan["sampler"] == "merged" and plan["compiled"] and plan["generation_batch_size"] == 32


def test_sampler_auto_minus_plain_is_the_merged_copy(models):
    """The figure a user sees includes the copy the plan will hold: auto (merged on a card it fits) minus plain is
    the 16-bit copy of the linear layers, 2 bytes per linear weight."""
    auto = _dry_run(models["7b"], "grpo")
    plain = _dry_run(models["7b"], "grpo", ["--set", "grpo.sampler=plain"])
    assert plain["sampler"] == "plain" and auto["sampler"] == "merged"
    vocab = json.loads((models["7b"] / "config.json").read_text())["vocab_size"]
    linear = auto["estimate"]["params"] - 2 * vocab * 3584  # untied 7B: embeddings and LM head are not copied
    assert auto["torch_peak_gb"] - plain["torch_peak_gb"] == pytest.approx(2 * linear / 2**30, rel=0.02)
    assert auto["estimate"]["sampler_copy_gb"] == pytest.approx(2 * linear / 2**30, rel=0.001)


# GRPO with a local judge model beside it: bench/gpu_judge_memory.py on one H200, 2026-11-26 (torch's peak reserved,
# GiB). The judge's 4-bit weights stay resident and its judging pass comes right after sampling, on top of the
# compiled sampler's static cache.
JUDGE_MEASURED = {"plain": 1.361, "judged": 2.32}


@pytest.mark.parametrize("name", list(JUDGE_MEASURED))
def test_a_local_judge_is_counted_within_10_percent_of_the_measured_peak(name, tmp_path_factory):
    import gpu_judge_memory as gj

    from app.data import build_splits
    from app.train.planning.plan import decide_machine, make_plan

    root = tmp_path_factory.mktemp("judge-shapes")
    policy, judge = gj.models(root, 2000, weights=False)
    cfg = gj.config(policy, judge if name == "judged" else None, root / "runs")
    rows, _, det = build_splits(cfg.data, cfg.training.seed)
    plan = make_plan(cfg, rows, det, machine=decide_machine(cfg, card_gb=80), offline=True)
    est = plan.estimate
    assert 0.9 <= est["torch_peak_gb"] / JUDGE_MEASURED[name] <= 1.1, (est["torch_peak_gb"], JUDGE_MEASURED[name])
    assert (est["judge_gb"] > 0.5) == (name == "judged")
