"""The text families people fine-tune in 2026, each as a tiny random model built from its config (tests/tiny.py
FAMILIES: its real chat template where TRL ships it, a tokenizer of its kind trained here), taken through every
step of the product: planned (its class and template said), loaded in 4-bit (which layers bitsandbytes converted),
LoRA targets found, 2 SFT steps on conversations (loss on the answers), 2 GRPO steps, its tool calls read back by
TRL's parser where TRL knows the template, merged (the merged model computes what base + adapter compute), and
converted to GGUF by llama.cpp's converter (its vocabulary checked in llama.cpp) where the converter takes it.

The table in docs/families.md is this test's output: it fails when the file says anything else
(QLORA_APP_WRITE_DOCS=1 writes it)."""

import json
import os
import re
from pathlib import Path

import pytest
from conftest import shared_dir, tiny_sets
from tiny import FAMILIES, build_family

from app.config.build import build_config
from app.errors import UserError
from app.run import layout, store
from app.train.running.session import Session

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "families.md"
BEGIN, END = "<!-- family table: written by tests/e2e/test_families.py -->", "<!-- end of family table -->"
STEPS = ("class", "4-bit load", "LoRA targets", "SFT", "GRPO", "template", "tool calls", "merge", "GGUF")
# Where the installed libraries cannot do a step, and the words of the line that says why (anything else fails).
NOT_SUPPORTED = {
    ("ministral", "GGUF"): "does not support the architecture MinistralForCausalLM",
    ("glm4", "GGUF"): "cannot load its class for Glm4ForCausalLM",  # its gguf module lacks a tensor name
}
FAST = ["training.save_steps=2", "training.max_length=256", "data.heldout_size=4"]  # with conftest.tiny_sets
TOKENS = [5, 17, 42, 99, 7, 3, 60, 61]  # what the merged model and llama.cpp are run on


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """Conversations (a system turn, a question, an answer) for SFT; questions with numeric answers for GRPO."""
    root = tmp_path_factory.mktemp("family-data")
    chat, math = root / "chat.jsonl", root / "math.jsonl"
    with chat.open("w") as c, math.open("w") as m:
        for i in range(24):
            a, b = i % 9 + 1, i % 7 + 2
            q = f"Tom has {a} apples and buys {b} more. How many apples does he have?"
            c.write(json.dumps({"messages": [{"role": "system", "content": "Answer briefly."},
                                             {"role": "user", "content": q},
                                             {"role": "assistant", "content": f"{a} + {b} = {a + b}. Final answer: "
                                                                              f"{a + b}"}]}) + "\n")
            m.write(json.dumps({"question": q, "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"}) + "\n")
    return {"sft": chat, "grpo": math}


def _train(model: Path, method: str, data: Path, out: Path) -> Path:
    cfg = build_config({"method": method, "model": {"name_or_path": str(model)}, "data": {"dataset": str(data)},
                        "output_dir": str(out), "run_name": method}, {"training": {"max_steps": 2}},
                       tiny_sets(method) + FAST)
    run = Session(cfg, progress=False).run()
    st = store.read_status(run)
    assert st["status"] == layout.FINISHED and st["step"] == 2, st
    return run


def _four_bit(model_dir: Path) -> str:
    """Which layers the real 4-bit load converted: the linear layers bitsandbytes quantized, what it left."""
    import bitsandbytes as bnb
    import torch

    from app.config.schema import ModelConfig
    from app.model.experts import expert_parameters
    from app.model.load import load_base_model

    model, _, info = load_base_model(ModelConfig(name_or_path=str(model_dir)), device="cpu")
    quantized = [n for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    kept = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and not isinstance(m, bnb.nn.Linear4bit)})
    assert info["4bit"] and quantized and kept == ["lm_head"], kept
    experts = sum(expert_parameters(model).values())
    total = sum(p.numel() for p in model.parameters())
    return (f"{len(quantized)} linear layers NF4, lm_head kept" +
            (f"; experts 16-bit ({experts / total:.0%} of the stored params)" if experts else ""))


def _lora_targets(run: Path) -> str:
    cfg = json.loads((run / layout.ADAPTER / "adapter_config.json").read_text())
    targets = cfg["target_modules"]
    return ", ".join(sorted({t.rsplit(".", 1)[-1] for t in (targets if isinstance(targets, list) else [targets])}))


def _tool_calls(model_dir: Path, family) -> str:
    """An assistant tool call written by the template and read back by TRL's parser (the one GRPO with tools uses)."""
    if not family["tool_calls"]:
        return "not read by TRL (a tool run is refused in one line)"
    from transformers import AutoTokenizer
    from trl.chat_template_utils import parse_response

    from app.model.templates import ensure_tool_parser

    tok = ensure_tool_parser(AutoTokenizer.from_pretrained(model_dir))
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 12, "b": 30}}}
    msgs = [{"role": "user", "content": "What is 12 + 30?"}]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, tools=[_ADD])
    whole = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "", "tool_calls": [call]}],
                                    tokenize=False, tools=[_ADD])
    assert whole.startswith(prompt)
    ids = tok(whole[len(prompt):], add_special_tokens=False)["input_ids"]
    got = parse_response(tok, ids, prefix=tok(prompt, add_special_tokens=False)["input_ids"])
    (read,) = got["tool_calls"]
    assert read["function"]["name"] == "add" and {k: int(v) for k, v in read["function"]["arguments"].items()} == {
        "a": 12, "b": 30}, got
    return "read back by TRL's parser"


_ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def _merge(run: Path, model_dir: Path, out: Path) -> str:
    """Export the merged model (fp32, onto the weights the adapter was trained on: the default); it must compute what
    the adapter on its 4-bit base computes (what the proof, chat and serve ran)."""
    import torch
    from transformers import AutoModelForCausalLM

    from app.export.bundle import export_run
    from app.model.pair import find_target, load_pair

    export_run(run, out, fmt="merged", dtype="fp32", local_only=True, measure_rows=0)
    with torch.no_grad():
        ids = torch.tensor([TOKENS])
        merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)(input_ids=ids).logits
        adapter = load_pair(find_target(run), local_only=True, device="cpu").model(input_ids=ids).logits.float()
    assert torch.allclose(merged, adapter, atol=1e-3), (merged - adapter).abs().max()
    return "merged computes as the adapter on its 4-bit base"


def _gguf(run: Path, merged: Path, out: Path) -> str:
    """Export an f32 GGUF; where llama.cpp is installed, its logits on a few tokens must be the merged model's."""
    pytest.importorskip("conversion")
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from app.export.bundle import export_run

    try:
        done = export_run(run, out, fmt="gguf", outtype="f32", local_only=True)
    except UserError as e:
        return f"not supported: {e}"
    try:
        import llama_cpp
    except ImportError:
        return "f32 written (llama.cpp is not installed here: not run)"
    try:
        llm = llama_cpp.Llama(str(out / done.files["gguf"]), logits_all=True, n_ctx=64, verbose=False)
    except ValueError:  # the llama.cpp in llama-cpp-python predates the architecture
        return f"f32 written; the installed llama.cpp (llama-cpp-python {llama_cpp.__version__}) cannot load it yet"
    llm.eval(TOKENS)
    theirs = np.array(llm.scores[:len(TOKENS)])
    with torch.no_grad():
        model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
        ours = model(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    assert np.abs(ours - theirs).max() <= 2e-3 * np.abs(ours).max(), np.abs(ours - theirs).max()
    return "f32 written; llama.cpp computes the merged model's logits"


def _through_every_step(family: str, data, tmp_path) -> dict[str, str]:
    name, model_type, *_ = FAMILIES[family]
    model_dir = build_family(family, tmp_path / family)
    row: dict[str, str] = {}
    sft = _train(model_dir, "sft", data["sft"], tmp_path / "runs")
    fam = store.read_status(sft)["family"]
    assert fam["model_type"] == model_type and fam["has_template"]
    row["class"] = fam["model_class"]
    row["4-bit load"] = _four_bit(model_dir)
    row["LoRA targets"] = _lora_targets(sft)
    answers = "every assistant turn" if fam["turn_masks"] else "each conversation's last answer"
    row["SFT"] = f"2 steps, loss on {answers}"
    _train(model_dir, "grpo", data["grpo"], tmp_path / "runs")
    row["GRPO"] = "2 steps"
    row["template"] = f"TRL's {fam['template']}" if fam["template"] else "its own (TRL ships none)"
    row["tool calls"] = _tool_calls(model_dir, fam)
    row["merge"] = _merge(sft, model_dir, tmp_path / "merged")
    row["GGUF"] = _gguf(sft, tmp_path / "merged", tmp_path / "gguf")
    for step, cell in row.items():
        refusal = NOT_SUPPORTED.get((family, step))
        if refusal:
            assert cell.startswith("not supported") and refusal in cell, (step, cell)
        else:
            assert not cell.startswith("not supported"), (step, cell)
    return {"family": f"{name} (`{model_type}`)", **row}


def row_line(row: dict[str, str]) -> str:
    """A family's line of the docs table."""
    return "| " + " | ".join(re.sub(r"\s+", " ", row[c]).replace("|", "/") for c in ("family",) + STEPS) + " |"


def _table(text: str) -> tuple[str, list[str], str]:
    """(the doc before the table, the table's lines, the doc after it)."""
    assert BEGIN in text and END in text, f"{DOC} lost its table markers"
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    return head, body.strip("\n").splitlines(), tail


HEADER = ["| " + " | ".join(("family",) + STEPS) + " |", "|" + "---|" * (len(STEPS) + 1)]


def _label(family: str) -> str:
    name, model_type, *_ = FAMILIES[family]
    return f"| {name} (`{model_type}`) |"


def check_docs_row(family: str, row: dict[str, str], tmp_path_factory) -> None:
    """The docs table's line for ``family`` is the one measured (QLORA_APP_WRITE_DOCS=1: written there, the
    table's lines kept in FAMILIES order). Each family checks its own line, so the table spreads over the workers."""
    line = row_line(row)
    if os.environ.get("QLORA_APP_WRITE_DOCS") != "1":
        _, lines, _ = _table(DOC.read_text(encoding="utf-8"))
        mine = [ln for ln in lines if ln.startswith(_label(family))]
        assert mine == [line], ("docs/families.md says something else than this test measured; rerun with "
                                f"QLORA_APP_WRITE_DOCS=1 to write it, and read the difference:\n{mine}\n{[line]}")
        return
    from filelock import FileLock

    with FileLock(str(shared_dir(tmp_path_factory) / "families-doc.lock")):
        head, lines, tail = _table(DOC.read_text(encoding="utf-8"))
        by_family = {f: next((ln for ln in lines if ln.startswith(_label(f))), None) for f in FAMILIES}
        by_family[family] = line
        body = HEADER + [ln for ln in by_family.values() if ln]
        DOC.write_text(f"{head}{BEGIN}\n" + "\n".join(body) + f"\n{END}{tail}", encoding="utf-8")


def test_the_docs_table_has_a_line_per_family_in_order():
    """The table's header and one line per family of tests/tiny.py FAMILIES, in its order (each line's cells are
    checked by that family's own test)."""
    _, lines, _ = _table(DOC.read_text(encoding="utf-8"))
    assert lines[:2] == HEADER
    assert [next((f for f in FAMILIES if ln.startswith(_label(f))), ln) for ln in lines[2:]] == list(FAMILIES)


_NAMES = list(FAMILIES)
_HALF = (len(_NAMES) + 1) // 2


# Two classes: pytest-xdist's --dist loadscope gives each its own worker (a file's plain functions stay together), so
# the table's 28 trainings, merges and conversions spread over both.
class TestFamiliesFirstHalf:
    @pytest.mark.parametrize("family", _NAMES[:_HALF])
    def test_family_through_every_step(self, family, data, tmp_path, tmp_path_factory):
        check_docs_row(family, _through_every_step(family, data, tmp_path), tmp_path_factory)


class TestFamiliesSecondHalf:
    @pytest.mark.parametrize("family", _NAMES[_HALF:])
    def test_family_through_every_step(self, family, data, tmp_path, tmp_path_factory):
        check_docs_row(family, _through_every_step(family, data, tmp_path), tmp_path_factory)
