"""The methods' registry (app/config/methods/): each method's facts are what the program reads, so changing a
method's object changes what resolve, the memory estimate, the card and the demo chooser do for it."""

import pytest

from app.config.build import validate
from app.config.fields import get_key
from app.config.methods import IN_WORDS, METHODS, ROW_KINDS, method_of, named, with_
from app.config.resolve import resolve, warnings_for
from app.errors import UserError


def test_each_method_is_whole():
    for name, m in METHODS.items():
        assert m.name == name and m.learns_from and m.rows in ROW_KINDS and m.said in IN_WORDS
        cfg = validate({"method": name})
        if m.section:
            assert hasattr(cfg, m.section), name
        if m.completion_key:  # a method that samples says how long its samples may be, a real key
            assert get_key(cfg, m.completion_key) > 0
        assert m.answer_tokens(cfg) > 0
        assert not (m.rewarded and not m.samples), f"{name}: a reward scores samples"
    assert named("nope") is None and named(None) is None
    from app.train.planning.rows import ROWS

    assert set(ROWS) == set(ROW_KINDS)  # every kind of row a method may name has its one builder
    assert set(with_("rewarded")) <= set(with_("samples"))


@pytest.mark.parametrize("name", list(METHODS))
def test_resolve_takes_the_methods_own_defaults(name, monkeypatch):
    m = METHODS[name]
    monkeypatch.setattr(type(m), "learning_rate", 1.234e-4)
    c = resolve(validate({"method": name}))
    assert c.training.learning_rate == 1.234e-4
    if m.rank is None:  # by the data's size (SFT), alpha with it
        assert c.lora.r == m.default_rank(None) and c.lora.alpha == max(16, c.lora.r // 4)
    else:
        monkeypatch.setattr(type(m), "rank", 24)
        c = resolve(validate({"method": name}))
        assert c.lora.r == 24 and c.lora.alpha == 32
    assert c.training.per_device_train_batch_size and c.training.gradient_accumulation_steps


def test_the_batch_advice_is_the_methods(monkeypatch):
    big = {"training": {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8}}
    assert any("effective batch 64 examples" in w for w in warnings_for(resolve(validate({"method": "dpo", **big}))))
    kto = warnings_for(resolve(validate({"method": "kto", **big})))  # KTO: its own guide's 16-128
    assert not any("effective batch" in w for w in kto)
    grpo = {"method": "grpo", "training": {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8},
            "grpo": {"num_generations": 2}, "lora": {"r": 128}}
    said = warnings_for(resolve(validate(grpo)))
    assert any("effective batch 32 prompts" in w for w in said) and any("lora.r=128" in w for w in said)


def test_a_methods_own_check_refuses_in_its_words():
    with pytest.raises(UserError, match="ORPO has one loss"):
        validate({"method": "orpo", "dpo": {"loss_type": ["hinge"]}})
    with pytest.raises(UserError, match="not a multiple of grpo.num_generations"):
        validate({"method": "grpo", "training": {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 1}})
    validate({"method": "dpo", "dpo": {"loss_type": ["hinge"]}})  # DPO's own setting


def test_the_memory_estimate_reads_the_methods_row_kind(monkeypatch):
    """Two sequences a row (pairs) against one: the micro-batch doubles, by the method's rows, not its name."""
    from app.train.planning.memory import micro_batch_tokens

    cfg = resolve(validate({"method": "dpo", "training": {"per_device_train_batch_size": 2, "max_length": 100}}))
    pairs = micro_batch_tokens(cfg, [100] * 10, packing=False)
    monkeypatch.setattr(type(method_of(cfg)), "rows", "conversation")
    assert micro_batch_tokens(cfg, [100] * 10, packing=False) * 2 == pairs == 400


def test_the_card_line_is_the_methods():
    from app.export.card import method_lines

    lines = {n: method_lines(resolve(validate({"method": n, **({"distill": {"teacher": "t/x"}} if n == "distill"
                                                                else {})}))) for n in METHODS}
    assert lines["sft"] == [] and lines["grpo"][0].startswith("- GRPO: 4 completions")
    assert "`t/x`" in lines["distill"][0] and "no reference" in lines["orpo"][0]


@pytest.mark.slow
def test_a_new_method_is_one_module_and_its_trainer(monkeypatch, tmp_path):
    """What adding a method takes (docs/architecture.md, "Adding a method"): its Method object and its trainer's line,
    nothing else. Here a method defined in this test alone (SFT's rows and trainer, its own defaults) plans, trains
    and is proved from the CLI, its defaults the run's."""
    from conftest import cli_here, tiny_sets

    from app.config.methods.sft import SFT
    from app.run import layout, store
    from app.train.methods.registry import TRAINERS

    class Brief(SFT):
        name = "brief"
        learns_from = "learn reference answers with a small adapter (a test's method)"
        learning_rate = 5e-4
        rank = 4

    monkeypatch.setitem(METHODS, "brief", Brief())
    monkeypatch.setitem(TRAINERS, "brief", TRAINERS["sft"])
    run = tmp_path / "run"
    sets = [a for s in tiny_sets("sft", proof_rows=4) for a in ("--set", s)]
    r = cli_here("train", "--method", "brief", "--dataset", "arith-sft", "--model", "arith-base", "--max-steps", "1",
                 "--local-only", "--no-progress", "--run-dir", run, *sets, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert store.read_status(run)["status"] == layout.FINISHED and (run / layout.COMPARE_JSON).is_file()
    saved = (run / layout.CONFIG).read_text()
    assert "method: brief" in saved and "learning_rate: 0.0005" in saved and "r: 4\n" in saved, saved
