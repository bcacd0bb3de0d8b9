"""app/export/lora_gguf.py: the adapter alone in llama.cpp's LoRA format. A real llama.cpp running the base's GGUF
with the adapter file answers as the merged GGUF does (LLaMA, whose q and k rows the converter permutes, with plain
LoRA; Qwen2 with rsLoRA, whose scale llama.cpp does not apply); what the format cannot carry is one line."""

import json
import shutil

import pytest

from app.errors import UserError
from app.export import lora_gguf


def _adapter(base, out, **lora):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False,
                                      task_type="CAUSAL_LM", **lora))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    import tiny

    root = tmp_path_factory.mktemp("lora-gguf")
    tiny.build_tokenizer(root / "tok")
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
    return {arch: tiny.build_from_config(arch, root / arch, root / "tok", **shape) for arch in ("llama", "qwen2")}


@pytest.mark.parametrize("arch,lora", [("llama", {}), ("qwen2", {"use_rslora": True})])
def test_the_bases_gguf_with_the_adapter_file_answers_as_the_merged_gguf(bases, tmp_path, arch, lora):
    pytest.importorskip("llama_cpp")
    import numpy as np
    from llamacpp import scores

    from app.export.base_gguf import export_base
    from app.export.bundle import export_run
    from app.export.quantize import tensor_types

    adapter = _adapter(bases[arch], tmp_path / "adapter", **lora)
    res = export_run(adapter, tmp_path / "lora", fmt="gguf-lora")  # the default type: f16
    lora_file = res.out / res.files["gguf-lora"]
    assert lora_file.name == "adapter-lora-f16.gguf" and set(tensor_types(lora_file)) == {"F16"}
    assert any("14 LoRA pairs" in n and "--lora" in n for n in res.notes), res.notes
    assert ("written into the B matrices" in " ".join(res.notes)) == bool(lora)
    card = (res.out / "README.md").read_text()
    assert f"llama-server -m BASE.gguf --lora {lora_file.name}" in card and f"ADAPTER ./{lora_file.name}" in card
    merged = export_run(adapter, tmp_path / "merged", fmt="gguf", outtype="f32")
    base = export_base(str(bases[arch]), tmp_path / "base", outtype="f32")  # the command the note names
    base_file = base.out / base.files["gguf"]
    assert f"qlora-app export --base {bases[arch]} --format gguf --outtype f16" in " ".join(res.notes)
    assert lora_file.stat().st_size < 0.2 * base_file.stat().st_size
    ids = list(range(5, 40))
    ref = scores(merged.out / merged.files["gguf"], ids)
    alone = np.abs(scores(base_file, ids) - ref).max()
    applied = np.abs(scores(base_file, ids, lora_path=str(lora_file)) - ref).max()
    assert alone > 0.3 and applied < 0.02 * alone, (alone, applied)  # measured: 0.90 / 0.0015 and 0.96 / 0.005


@pytest.fixture(scope="module")
def plain(bases, tmp_path_factory):
    return _adapter(bases["qwen2"], tmp_path_factory.mktemp("plain") / "adapter")


def _variant(plain, tmp_path, config=None, tensors=None):
    out = tmp_path / "variant"
    shutil.copytree(plain, out)
    if config:
        path = out / "adapter_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    if tensors is not None:
        from safetensors.torch import load_file, save_file

        weights = load_file(str(out / "adapter_model.safetensors"))
        save_file(tensors(weights), str(out / "adapter_model.safetensors"))
    return out


def test_what_an_adapter_gguf_cannot_carry_is_one_line(plain, tmp_path):
    import torch

    from app.export.bundle import export_run

    def extra(w):
        return {**w, "base_model.model.lm_head.weight": torch.zeros(4, 4)}

    def half(w):
        return {k: v for k, v in w.items() if "layers.0.self_attn.q_proj.lora_B" not in k}

    cases = [(dict(config={"use_dora": True}), r"DoRA \(use_dora\).*export --format gguf"),
             (dict(config={"modules_to_save": ["lm_head"]}), r"fully trained modules"),
             (dict(config={"peft_type": "IA3"}), r"the adapter is IA3, not LoRA"),
             (dict(tensors=extra), r"holds 'base_model.model.lm_head.weight', not a LoRA A or B matrix"),
             (dict(tensors=half), r"q_proj.weight has only lora_A; the file is incomplete")]
    for i, (change, message) in enumerate(cases):
        bad = _variant(plain, tmp_path / str(i), **change)
        with pytest.raises(UserError, match=message):
            export_run(bad, tmp_path / f"out{i}", fmt="gguf-lora")
        assert not (tmp_path / f"out{i}").exists()  # nothing left behind
    for outtype in ("q4_k_m", "f16,q8_0"):
        with pytest.raises(UserError, match=r"not a type of an adapter GGUF; pick one of f16, bf16, q8_0, f32"):
            export_run(plain, tmp_path / "k", fmt="gguf-lora", outtype=outtype)


def test_a_scale_llama_cpp_would_not_apply_is_written_into_b(plain, tmp_path):
    """llama.cpp scales by one alpha over each tensor's rank: plain LoRA keeps its B and alpha; a per-module alpha
    (PEFT's alpha_pattern) and rsLoRA put their scale into B and write alpha 0 (llama.cpp: scale 1)."""
    as_is = lora_gguf.read_pairs(plain)
    assert as_is.alpha == 16 and not as_is.baked
    patterned = lora_gguf.read_pairs(_variant(plain, tmp_path / "p", config={"alpha_pattern": {"q_proj": 64}}))
    assert patterned.alpha == 0 and patterned.baked
    q, v = "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.weight"
    assert float((patterned.ab[q][1] / as_is.ab[q][1]).mean()) == pytest.approx(64 / 8)
    assert float((patterned.ab[v][1] / as_is.ab[v][1]).mean()) == pytest.approx(16 / 8)
    rs = lora_gguf.read_pairs(_variant(plain, tmp_path / "r", config={"use_rslora": True}))
    assert float((rs.ab[v][1] / as_is.ab[v][1]).mean()) == pytest.approx(16 / 8 ** 0.5)


def test_export_format_gguf_lora_from_the_cli(plain, tmp_path):
    from conftest import cli_here

    ok = cli_here("export", plain, "--format", "gguf-lora", "--out", tmp_path / "ok", "--outtype", "q8_0")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "adapter-lora-q8_0.gguf" in ok.stdout and (tmp_path / "ok" / "adapter-lora-q8_0.gguf").is_file()
    bad = cli_here("export", plain, "--format", "gguf-lora", "--out", tmp_path / "bad", "--outtype", "q4_k_m")
    assert bad.returncode == 2 and "not a type of an adapter GGUF" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()



def test_export_base_makes_the_gguf_a_gguf_lora_loads_beside(tmp_path):
    """`export --base` of a shipped model (its tokenizer declared for the converter) writes its GGUF (llama.cpp
    reads it: the same greedy tokens as transformers) and a card naming the --lora command; a base that is nowhere,
    a run and a base at once, or another format are one line each, nothing written."""
    pytest.importorskip("llama_cpp")
    import torch
    from conftest import cli_here
    from llamacpp import greedy_answers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.config.builtin import builtin_model_path

    ok = cli_here("export", "--base", "arith-base", "--out", tmp_path / "base", "--outtype", "f16")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    gguf_file = tmp_path / "base" / "arith-base-f16.gguf"
    assert gguf_file.is_file() and "--lora ADAPTER.gguf" in (tmp_path / "base" / "README.md").read_text()
    path = builtin_model_path("arith-base")
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    ids = tok.apply_chat_template([{"role": "user", "content": "Tom has 3 apples and buys 4 more."}],
                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    with torch.no_grad():
        hf = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    assert greedy_answers(gguf_file, [ids], 12)[0] == [t for t in hf if t != tok.eos_token_id][:12]
    for args, said in ((["--base", "no-such-model-here"], "is not a folder here nor in the local HF cache"),
                       (["--base", "arith-base", "--format", "merged"], "--base exports a base model as a GGUF"),
                       ([], "export takes a run (qlora-app export RUN) or a base model")):
        bad = cli_here("export", *args, "--out", tmp_path / "bad", "--local-only")
        assert bad.returncode == 2 and said in " ".join(bad.stderr.split()), bad.stderr
        assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()
