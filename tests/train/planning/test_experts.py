"""A mixture-of-experts run, planned and trained: the plan counts the experts as they load (16-bit unless
model.quantize_experts), says so in the dry run and records it; LoRA goes on the experts only when
lora.target_experts asks (PEFT would otherwise put it on the experts and the router of some families, or silently
nowhere on quantized ones); the bad combinations are one line, exit 2, no folder. End to end: SFT on a chat dataset
(whose held-out evaluation generated with the router's loss on, and failed, before) in each mode."""

import json
import re

import pytest
from conftest import cli as _cli
from conftest import cli_here
from safetensors import safe_open

from app.config.build import build_config
from app.run import layout
from app.train.planning.plan import make_plan


@pytest.fixture()
def chat_jsonl(tmp_path):
    p = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"What is {a} + {b}?"},
                          {"role": "assistant", "content": f"Answer: {a} + {b} = {a + b}. Final answer: {a + b}"}]}
            for a in range(12) for b in range(4)]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    return p


def test_dry_run_says_the_experts_stay_16bit(tiny_moe, chat_jsonl, tmp_path):
    r = cli_here("train", "--model", str(tiny_moe["qwen3_moe"]), "--dataset", str(chat_jsonl), "--method", "sft",
             "--dry-run", "--output-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = " ".join((r.stdout + r.stderr).split())
    assert "experts: 8 per MoE layer in 2 layer(s), 0.10M of 0.18M params (56%), 16-bit" in out
    assert "model.quantize_experts=true makes them NF4" in out and "not the experts" in out
    assert "router_aux_loss_coef 0.001" in out and "56% of them experts in 16-bit" in out
    assert not (tmp_path / "runs").exists()


def _plan(path, chat_jsonl, **sets):
    from app.data.splits import build_splits

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(path)}, "data": {"dataset": str(chat_jsonl)},
                        "runtime": {"local_only": True, "device": "cpu"}},
                       sets=[f"{k}={v}" for k, v in sets.items()])
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    return make_plan(cfg, train, det, offline=True)


def test_the_estimate_counts_the_experts_as_they_load(tiny_moe, tiny_model, chat_jsonl):
    plan = _plan(tiny_moe["qwen3_moe"], chat_jsonl)
    c = plan.experts.census
    assert plan.estimate["params"] == c.total == 175_488 and plan.estimate["expert_params"] == c.experts == 98_304
    quantized = _plan(tiny_moe["qwen3_moe"], chat_jsonl, **{"model.quantize_experts": "true"})
    assert quantized.experts.quantized and quantized.estimate["experts_4bit"]
    assert quantized.estimate["weights_gb"] < plan.estimate["weights_gb"]
    assert quantized.experts.why == "model.quantize_experts" and plan.experts.why.startswith("auto: they fit")
    assert quantized.estimate["torch_peak_gb"] < plan.estimate["torch_peak_gb"]  # quantized as they load
    st = plan.status_fields()[layout.EXPERTS]
    assert st["expert_params"] == 98_304 and st["experts_4bit"] is False and st["router"]["num_experts_per_tok"] == 2
    assert _plan(tiny_model, chat_jsonl).experts is None  # a dense model is planned as before


@pytest.mark.parametrize("case", ["dense", "quantized"])
def test_lora_on_experts_that_cannot_take_it_is_one_line(tiny_moe, tiny_model, chat_jsonl, tmp_path, case):
    model = tiny_model if case == "dense" else tiny_moe["qwen3_moe"]
    extra = ["--set", "model.quantize_experts=true"] if case == "quantized" else []
    r = cli_here("train", "--model", str(model), "--dataset", str(chat_jsonl), "--method", "sft", "--set",
             "lora.target_experts=true", *extra, "--output-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert ("has no experts (a dense model)" if case == "dense" else "PEFT cannot wrap") in r.stderr
    assert not (tmp_path / "runs").exists()


def _adapter_keys(run_dir):
    with safe_open(str(run_dir / "adapter" / "adapter_model.safetensors"), "pt") as f:
        return list(f.keys())


@pytest.mark.slow
@pytest.mark.parametrize("family,mode", [("qwen3_moe", "default"), ("qwen2_moe", "default"),
                                         ("mixtral", "target_experts"), ("qwen3_moe", "quantize_experts")])
def test_sft_on_a_moe_model_end_to_end(tiny_moe, chat_jsonl, tmp_path, family, mode):
    sets = {"target_experts": ["--set", "lora.target_experts=true"],
            "quantize_experts": ["--set", "model.quantize_experts=true"]}.get(mode, [])
    r = _cli("train", "--model", str(tiny_moe[family]), "--dataset", str(chat_jsonl), "--method", "sft",
             "--max-steps", "3", "--run-dir", str(tmp_path / "run"), *sets, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "run"
    st = json.loads((run / layout.STATUS).read_text())
    assert st[layout.EXPERTS]["experts_4bit"] is (mode == "quantize_experts")
    assert st[layout.EXPERTS]["lora_on_experts"] is (mode == "target_experts")
    assert (run / layout.COMPARE_JSON).is_file()  # the proof generated from the MoE model
    keys = _adapter_keys(run)
    on_experts = [k for k in keys if ".experts." in k]
    assert bool(on_experts) is (mode == "target_experts"), on_experts[:4]
    assert not [k for k in keys if ".mlp.gate." in k]  # never on the router
    assert any("self_attn" in k for k in keys)
    # the card says which parameters were 4-bit; the merge folds LoRA on the experts into them
    fmt = "merged" if mode == "target_experts" else "adapter"
    e = _cli("export", str(run), "--format", fmt, "--out", str(tmp_path / "export"), "--local-only", cwd=tmp_path)
    assert e.returncode == 0, e.stderr[-2000:]
    card = (tmp_path / "export" / "README.md").read_text()
    assert "mixture of experts: " in card and ("the experts 4-bit" if mode == "quantize_experts" else
                                               "the experts 16-bit") in card
    if fmt == "merged":
        import torch
        from transformers import AutoModelForCausalLM

        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32)
        base = AutoModelForCausalLM.from_pretrained(tiny_moe[family], dtype=torch.float32)
        name = next(n for n, _ in merged.named_parameters() if n.endswith("experts.down_proj"))
        assert not torch.equal(merged.get_parameter(name), base.get_parameter(name))  # the experts' LoRA, merged


def test_a_family_this_transformers_does_not_know_is_one_line(tiny_moe, chat_jsonl, tmp_path):
    import shutil

    model = tmp_path / "fancy"
    shutil.copytree(tiny_moe["qwen3_moe"], model)
    config = json.loads((model / "config.json").read_text())
    config.update(model_type="fancy_moe_2027", architectures=["FancyMoeForCausalLM"])
    (model / "config.json").write_text(json.dumps(config))
    r = cli_here("train", "--model", str(model), "--dataset", str(chat_jsonl), "--method", "sft", "--output-dir",
             str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "fancy_moe_2027" in r.stderr and "does not recognize this architecture" in r.stderr
    assert not (tmp_path / "runs").exists()


# Config-only folders of the flagships' published dimensions (a dry run reads no weights)
FLAGSHIPS = {
    "qwen3-30b-a3b": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
                      "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                      "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                      "max_position_embeddings": 40960, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                      "router_aux_loss_coef": 0.001, "norm_topk_prob": True},
    "gpt-oss-20b": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
                    "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                    "intermediate_size": 2880, "num_local_experts": 32, "num_experts_per_tok": 4,
                    "vocab_size": 201088, "max_position_embeddings": 131072, "sliding_window": 128,
                    "layer_types": ["sliding_attention", "full_attention"] * 12, "tie_word_embeddings": False,
                    "torch_dtype": "bfloat16", "router_aux_loss_coef": 0.9},
    # Qwen3.5-35B-A3B: a vision-language checkpoint whose text model has 3 Gated DeltaNet (linear-attention) layers in
    # every 4, 256 experts and a 248K vocabulary (Qwen/Qwen3.5-35B-A3B config.json, text and vision parts)
    "qwen3.5-35b-a3b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False, "image_token_id": 248056, "video_token_id": 248057,
        "vision_start_token_id": 248053, "vision_end_token_id": 248054,
        "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
                        "layer_types": ["linear_attention"] * 3 + ["full_attention"] + (["linear_attention"] * 3 +
                                                                                        ["full_attention"]) * 9,
                        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                        "head_dim": 256, "num_attention_heads": 16, "num_key_value_heads": 2,
                        "attn_output_gate": True, "num_experts": 256, "num_experts_per_tok": 8,
                        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "vocab_size": 248320,
                        "max_position_embeddings": 262144, "tie_word_embeddings": False, "mtp_num_hidden_layers": 1,
                        "dtype": "bfloat16", "router_aux_loss_coef": 0.001, "rms_norm_eps": 1e-6,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                            "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                                            "mrope_section": [11, 11, 10]}},
        "vision_config": {"model_type": "qwen3_5_moe_vision", "depth": 27, "hidden_size": 1152,
                          "intermediate_size": 4304, "num_heads": 16, "out_hidden_size": 2048, "patch_size": 16,
                          "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
                          "num_position_embeddings": 2304, "hidden_act": "gelu_pytorch_tanh"}},
}


@pytest.mark.parametrize("name, low, high", [("qwen3-30b-a3b", 15, 20), ("gpt-oss-20b", 12, 16),
                                             ("qwen3.5-35b-a3b", 18, 23)])
def test_the_flagships_fit_a_24gb_card_with_their_experts_4bit(name, low, high, chat_jsonl, tmp_path):
    """Qwen3-30B-A3B (Unsloth publishes QLoRA in 17.5 GB) and gpt-oss-20b (14 GB): on auto the plan makes the
    experts 4-bit where 16-bit ones would not fit, says why, records it, and the estimate sits near the anchors'."""
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(FLAGSHIPS[name]))
    r = cli_here("train", "--model", str(model), "--dataset", str(chat_jsonl), "--method", "sft", "--dry-run",
                 "--gpu-memory", "24", "--local-only", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    est = plan["estimate"]
    assert est["experts_4bit"] and low < plan["total_gb"] < high, plan["total_gb"]
    assert plan["verdict"] == "fits" and plan["verdicts"]["24"] == "fits", plan["verdicts"]
    assert any(a.startswith("model.quantize_experts") for a in plan["adjustments"]), plan["adjustments"]
    said = " ".join(" ".join(plan["notes"] + plan["adjustments"]).split())
    assert "more than this 24 GB GPU" in said and "auto: 16-bit they would not fit this GPU" in said
    if name.startswith("qwen3.5"):  # its text model as trained: experts, linear-attention layers, the 248K vocabulary
        assert 34.5e9 < est["params"] < 34.8e9 and est["expert_params"] == 40 * 256 * 3 * 2048 * 512
        assert "30 linear-attention layers need flash-linear-attention and causal-conv1d" in said
    # LoRA on the experts keeps them 16-bit (PEFT wraps them as loaded): then no 24 GB card holds it, said so
    t = cli_here("train", "--model", str(model), "--dataset", str(chat_jsonl), "--method", "sft", "--dry-run",
                 "--gpu-memory", "24", "--local-only", "--set", "lora.target_experts=true", cwd=tmp_path)
    said = " ".join((t.stdout + t.stderr).split())
    assert "16-bit" in said and "lora.target_experts" in said and ("too big" in said or t.returncode == 2), said[-800:]


def _flagship(tmp_path, name):
    model = tmp_path / name
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(FLAGSHIPS[name]))
    return model


@pytest.mark.parametrize("backend, quantize, planned, experts_4bit, verdict", [
    ("auto", None, "hf", True, "fits"),  # only hf quantizes the experts as they load
    ("auto", "false", "unsloth", False, "too big"),  # 16-bit experts asked: Unsloth kept
    ("unsloth", None, "unsloth", False, "too big"),  # planned as Unsloth loads them
])
def test_the_unsloth_backend_is_planned_with_the_experts_it_loads(tmp_path, chat_jsonl, backend, quantize, planned,
                                                                   experts_4bit, verdict):
    """Unsloth loads a MoE through transformers' 4-bit loader, which leaves the fused experts 16-bit: a machine that
    would give a MoE run Unsloth plans it so (or, on auto, runs it on hf, which quantizes them as they load)."""
    from app.data.splits import build_splits
    from app.errors import UserError
    from app.train.planning.plan import decide_machine

    sets = [f"runtime.backend={backend}"] + ([f"model.quantize_experts={quantize}"] if quantize else [])
    cfg = build_config({"method": "sft", "model": {"name_or_path": str(_flagship(tmp_path, "qwen3-30b-a3b"))},
                        "data": {"dataset": str(chat_jsonl)}, "runtime": {"local_only": True}}, sets=sets)
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    hf = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"backend": "hf"})})
    where, _ = decide_machine(hf, card_gb=24)  # the card's placement (Unsloth is not installed here)
    if verdict == "too big":  # 16-bit experts: the fit check's one line says what makes them 4-bit
        with pytest.raises(UserError, match=r"\(its experts are 16-bit: " + (
                "the Unsloth backend loads them so; runtime.backend=hf quantizes them as they load" if backend ==
                "unsloth" else "model.quantize_experts=false; leave it empty and the plan quantizes them") + r"\)$"):
            make_plan(cfg, train, det, machine=(where, "unsloth"), offline=True)
        cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"fit_check": False})})
    said_lines = []
    plan = make_plan(cfg, train, det, machine=(where, "unsloth"), offline=True, note=said_lines.append)
    assert plan.backend == planned and plan.experts.quantized is experts_4bit
    assert plan.estimate["experts_4bit"] is experts_4bit and (plan.estimate["total_gb"] < 24) is (verdict == "fits")
    said = " ".join(" ".join(said_lines).split())
    if planned == "hf":
        assert "backend hf: only it quantizes a mixture-of-experts model's fused experts as they load" in said
    if backend == "unsloth":
        assert any(a.key == "model.quantize_experts" and a.now == "false" for a in plan.adjustments), plan.adjustments
        assert "runtime.backend=hf quantizes them as they load" in said


def test_quantized_experts_asked_of_the_unsloth_backend_is_one_line(tmp_path, chat_jsonl):
    from app.data.splits import build_splits
    from app.errors import UserError
    from app.train.planning.plan import decide_machine

    cfg = build_config({"method": "sft", "model": {"name_or_path": str(_flagship(tmp_path, "gpt-oss-20b"))},
                        "data": {"dataset": str(chat_jsonl)}, "runtime": {"local_only": True}},
                       sets=["runtime.backend=unsloth", "model.quantize_experts=true"])
    train, _, det = build_splits(cfg.data, 42, local_only=True)
    with pytest.raises(UserError, match=r"model.quantize_experts=true needs runtime.backend=hf \(or auto\)"):
        make_plan(cfg, train, det, machine=(decide_machine(cfg.model_copy(update={"runtime": cfg.runtime.model_copy(
            update={"backend": "hf"})}), card_gb=24)[0], "unsloth"), offline=True)


def test_whether_the_experts_precision_is_the_plans_to_choose_is_said_once():
    """experts.may_be_4bit / on_auto are the one statement of it: the fit check, the backend's choice and the
    experts' line read them; nothing else in app/ tests model.quantize_experts against None or False (a later stage
    deciding again). The table: a 4-bit run, no LoRA on the experts, the setting empty (auto) / true / false."""
    import ast

    from repo_paths import ROOT

    from app.train.planning.experts import may_be_4bit, on_auto

    def cfg(four=True, lora=False, quantize=None):
        return build_config(sets=[f"model.load_in_4bit={str(four).lower()}", f"lora.target_experts={str(lora).lower()}",
                                  f"model.quantize_experts={'' if quantize is None else str(quantize).lower()}"])

    assert on_auto(cfg()) and may_be_4bit(cfg())
    assert may_be_4bit(cfg(quantize=True)) and not on_auto(cfg(quantize=True))
    assert not may_be_4bit(cfg(quantize=False)) and not on_auto(cfg(quantize=False))
    assert not may_be_4bit(cfg(lora=True)) and not may_be_4bit(cfg(four=False))
    home = ROOT / "app" / "train" / "planning" / "experts.py"
    strays = []
    for path in (ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(s, ast.Attribute) and s.attr == "quantize_experts"
                                                     for s in [node.left, *node.comparators]):
                strays += [] if path == home else [f"{path.relative_to(ROOT)}:{node.lineno}"]
    assert not strays, f"the experts' precision decided outside app/train/planning/experts.py: {strays}"


@pytest.mark.parametrize("name, quant, said, cards", [
    ("gpt-oss-20b", {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]},
     "model published in MXFP4, 32-value blocks (the experts): each tensor is dequantized as it loads", ("24", "16")),
    ("Qwen3-30B-A3B-FP8", {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     "model published in FP8, 128x128 blocks: each tensor is dequantized as it loads", ("24",)),
])
def test_a_flagship_as_published_plans_as_its_16bit_upload(name, quant, said, cards, chat_jsonl, tmp_path):
    """gpt-oss as OpenAI publishes it (MXFP4 experts) and a block-FP8 release: the plan reads the format before
    anything loads, says how it is read, and plans what the 16-bit upload plans (the experts' conversion runs in host
    memory: the GPU sees the same 16-bit tensor in flight), on the cards docs/memory.md plans them on."""
    shape = FLAGSHIPS["gpt-oss-20b" if name.startswith("gpt") else "qwen3-30b-a3b"]
    figures = {}
    for folder, config in ((name, {**shape, "quantization_config": quant}), (name + "-16bit", shape)):
        model = tmp_path / folder
        model.mkdir()
        (model / "config.json").write_text(json.dumps(config))
        for card in cards:
            r = cli_here("train", "--model", str(model), "--dataset", str(chat_jsonl), "--method", "sft",
                         "--local-only", "--dry-run", "--gpu-memory", card, cwd=tmp_path)
            out = " ".join((r.stdout + r.stderr).split())
            assert r.returncode == 0, out[-800:]
            assert (said in out) == (folder == name), out[-1500:]
            figures[folder, card] = re.search(r"memory estimate .*?\(from", out).group(0)
    for card in cards:
        assert figures[name, card] == figures[name + "-16bit", card] and "fits" in figures[name, card]
