"""A tiny gpt-oss with its experts in MXFP4 and a tiny Qwen3-MoE in block FP8, written as the hub publishes them
(tests/published.py), taken through a QLoRA run with the real CLI: planned (the format said, the same memory figure
as its 16-bit twin's), trained with every linear layer and expert in NF4, the format recorded in status.json, and
exported merged onto the weights the adapter trained on: the merged folder computes what the adapter on its 4-bit
base computes. A format not read here (GPTQ) is one line, exit 2, no run folder."""

import json
import re

import pytest
import published
import tiny
from conftest import cli_here, tiny_sets

from app.run import layout, store

pytestmark = pytest.mark.slow

CASES = {"gpt-oss in MXFP4": ("gpt_oss", "mxfp4", None), "Qwen3-MoE in block FP8": ("qwen3_moe", "fp8", 32)}
TOKENS = [5, 17, 42, 99, 7, 3, 60, 61]


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    p = tmp_path_factory.mktemp("published-data") / "chat.jsonl"
    p.write_text("\n".join(json.dumps({"messages": [
        {"role": "user", "content": f"What is {a} + {b}?"},
        {"role": "assistant", "content": f"{a} + {b} = {a + b}. Final answer: {a + b}"}]})
        for a in range(8) for b in range(3)))
    return p


def _plan_figure(out: str) -> str:
    """The dry run's memory estimate, its figures and verdict."""
    return re.search(r"memory estimate .*?\(from", out).group(0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_published_checkpoint_trains_in_4bit_and_ships_what_it_measured(case, chat, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from app.export.bundle import export_run
    from app.model.pair import find_target, load_pair

    family, fmt, block = CASES[case]
    tiny.build_tokenizer(tmp_path / "tok")
    src = tiny.build_moe(family, tmp_path / family, tmp_path / "tok")
    pub, twin = published.publish(src, tmp_path, fmt, block)
    sets = [a for s in tiny_sets("sft") + ["training.save_steps=2", "data.heldout_size=4",
                                           "model.quantize_experts=true"] for a in ("--set", s)]
    plans = {}
    for name, model in (("published", pub), ("twin", twin)):
        r = cli_here("train", "--model", str(model), "--dataset", str(chat), "--method", "sft", "--local-only",
                     "--dry-run", "--gpu-memory", "16", *sets, cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
        plans[name] = " ".join((r.stdout + r.stderr).split())
    said = f"model published in {'MXFP4, 32-value blocks (the experts)' if fmt == 'mxfp4' else 'FP8, 32x32 blocks'}: " \
           "each tensor is dequantized"
    assert said in plans["published"] and "model published in" not in plans["twin"]
    assert _plan_figure(plans["published"]) == _plan_figure(plans["twin"])  # the same model, the same bytes

    r = cli_here("train", "--model", str(pub), "--dataset", str(chat), "--method", "sft", "--local-only",
                 "--max-steps", "2", "--output-dir", str(tmp_path / "runs"), *sets, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    st = store.read_status(run)
    assert st["status"] == layout.FINISHED and st["step"] == 2
    assert st["published_as"].startswith("MXFP4" if fmt == "mxfp4" else "FP8, 32x32 blocks")
    assert st[layout.EXPERTS]["experts_4bit"]

    export_run(run, tmp_path / "merged", fmt="merged", dtype="fp32", local_only=True, measure_rows=0)
    merged_config = json.loads((tmp_path / "merged" / "config.json").read_text())
    assert "quantization_config" not in merged_config  # a plain 16-bit folder, readable anywhere
    with torch.no_grad():
        ids = torch.tensor([TOKENS])
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32)(input_ids=ids).logits
        adapter = load_pair(find_target(run), local_only=True, device="cpu").model(input_ids=ids).logits.float()
    assert torch.allclose(merged, adapter, atol=1e-3), (merged - adapter).abs().max()


def test_a_format_not_read_here_is_one_line(tiny_moe, chat, tmp_path):
    model = tmp_path / "qwen3-moe-GPTQ-Int4"
    model.mkdir()
    for f in tiny_moe["qwen3_moe"].iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "gptq",
                                                                                      "bits": 4}}))
    r = cli_here("train", "--model", str(model), "--dataset", str(chat), "--method", "sft", "--local-only",
                 "--max-steps", "1", "--output-dir", str(tmp_path / "runs"), cwd=tmp_path)
    line = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2 and "is published in GPTQ" in line and "Traceback" not in line, line[-800:]
    assert f"pass {tmp_path / 'qwen3-moe'} as --model" in line and not (tmp_path / "runs").exists()
