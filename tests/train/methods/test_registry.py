"""The trainer table: every method of app/config/methods has a trainer, and nothing else does."""

from app.config.methods import METHODS
from app.train.methods.registry import TRAINERS


def test_every_method_has_a_trainer_and_every_trainer_a_method():
    assert set(TRAINERS) == set(METHODS)


def test_the_trainer_is_built_from_the_table(monkeypatch):
    """running/build.build_trainer takes the trainer the table names for the plan's method (a new method's line in
    TRAINERS is all running needs)."""
    from types import SimpleNamespace

    from app.train.running import build

    seen = []
    monkeypatch.setitem(TRAINERS, "kto", lambda plan, loaded, run_dir, rewards, counts, hear: seen.append(
        (plan.cfg.method, loaded, run_dir, rewards, counts, hear)) or "trainer")
    plan = SimpleNamespace(cfg=SimpleNamespace(method="kto"))
    assert build.build_trainer(plan, "loaded", "dir", "counts", rewards="r", on_sampler_change="h") == "trainer"
    assert seen == [("kto", "loaded", "dir", "r", "counts", "h")]
