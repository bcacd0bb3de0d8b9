"""A run's model pair (app/model/pair.py), the one way every command opens an adapter: which base it belongs to, a
--model naming another base refused, a folder that is no PEFT adapter refused, a side that does not exist refused, and
the conversation prompt with the run's system prompt. (Loading for real: tests/eval/test_compare.py checks the base side
token for token against a plainly loaded base.)"""

import json
from types import SimpleNamespace

import pytest

from app.errors import UserError
from app.model.pair import Pair, conversation_prompt, find_target, same_model


def _adapter(folder, base="org/Some-Model-1B", **extra):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": base,
                                                            **extra}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def test_a_bare_adapter_says_its_base_and_a_local_copy_of_it_is_the_same_base(tmp_path):
    adapter = _adapter(tmp_path / "adapter")
    target = find_target(adapter)
    assert target.run_cfg is None and target.trained_on == "org/Some-Model-1B"
    assert target.base.name_or_path == "org/Some-Model-1B" and target.system_prompt is None
    assert target.device == "auto"
    assert find_target(adapter, "./models/Some-Model-1B").base.name_or_path == "./models/Some-Model-1B"
    assert same_model("org/Some-Model-1B", "/data/some-model-1b")
    with pytest.raises(UserError, match="was trained on base 'org/Some-Model-1B', not on 'org/Other'"):
        find_target(adapter, "org/Other")


def test_what_is_not_an_adapter_is_one_line(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text("{not json")
    (bad / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(UserError, match="is not valid JSON"):
        find_target(bad)
    no_base = _adapter(tmp_path / "nobase", base=None)
    with pytest.raises(UserError, match="does not say which base model"):
        find_target(no_base)


def test_the_base_side_is_the_adapter_switched_off():
    calls = []

    class Model:
        def disable_adapter(self):
            calls.append("off")
            return SimpleNamespace(__enter__=lambda *a: None, __exit__=lambda *a: None)

    pair = Pair(None, Model(), None)
    pair.side("base")
    pair.side("adapter")
    assert calls == ["off"]
    with pytest.raises(UserError, match="side 'both' is not one of adapter, base"):
        pair.side("both")


def test_a_conversation_gets_the_runs_system_prompt_unless_it_has_its_own():
    from app.ask.asking import Ask
    from app.data.convert import plain_prompt
    from app.data.detect import detect_from_rows

    tok = SimpleNamespace(chat_template=None)  # no template: the plain prompt training wrote (one rule)
    asked = [{"role": "user", "content": "2 + 2"}]
    assert conversation_prompt(tok, asked, "Be brief.") == "Be brief.\n\n2 + 2"
    own = [{"role": "system", "content": "Be long."}, *asked]
    assert conversation_prompt(tok, own, "Be brief.") == "System: Be long.\n\nUser: 2 + 2"
    assert conversation_prompt(tok, asked) == "2 + 2"
    # what training wrote for the same rows, and what every asker sends (app/ask): the same text
    plain = {"question": "2 + 2", "answer": "4"}
    chat = {"messages": [*own, {"role": "assistant", "content": "4"}]}
    assert plain_prompt(plain, detect_from_rows([plain], list(plain)), "Be brief.") == conversation_prompt(
        tok, asked, "Be brief.") == Ask.of(asked, "Be brief.").plain
    assert plain_prompt(chat, detect_from_rows([chat], list(chat)), None) == conversation_prompt(
        tok, own, "Be brief.") == Ask.of(own, "Be brief.").plain


@pytest.mark.slow
def test_a_merge_onto_the_trained_weights_computes_what_the_adapter_did(tiny_models, tmp_path):
    """A 4-bit run's adapter merged onto its NF4 base dequantized (the export default) gives the logits of the
    adapter on the 4-bit base (what the proof, chat and serve ran), to float rounding; merged onto the base's own
    weights it does not (the NF4 rounding the adapter was trained against is gone)."""
    import torch
    from fakes import make_adapter, write_run

    from app.model.pair import load_pair, merged_model

    base = tiny_models["llama"]
    run = write_run(tmp_path / "run", base, make_adapter(base, tmp_path / "a"))
    target = find_target(run)
    assert target.base.load_in_4bit
    ids = torch.tensor([list(range(3, 40))])
    with torch.no_grad():
        pair = load_pair(target, local_only=True, device="cpu")
        adapter = pair.model(input_ids=ids).logits.float()
        trained = merged_model(target.adapter_dir, str(base), torch.float32, True)(input_ids=ids).logits
        original = merged_model(target.adapter_dir, str(base), torch.float32, True, onto="original")(
            input_ids=ids).logits
    near, far = (trained - adapter).abs().max().item(), (original - adapter).abs().max().item()
    assert near < 1e-3 and far > 30 * near, (near, far)
