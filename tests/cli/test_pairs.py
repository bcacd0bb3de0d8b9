"""`qlora-app pairs` (app/cli/pairs.py): sampling and scoring on the cores other processes leave free."""

import pytest
from conftest import cli_here

pytestmark = pytest.mark.slow


def test_pairs_takes_the_cores_a_busy_machine_leaves_free(monkeypatch, tmp_path):
    """Beside another job (1.9 of 2 cores busy at its one look), the pairs command samples on one thread and says
    so; it took torch's default of a thread per core (4 busy threads on 2 cores: one demo sat 11 minutes at its
    first pairs batch)."""
    import torch

    import app.cli.pairs as pairs_cli
    from app.host import threads as ct

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(ct, "usable_cores", lambda: 2)
    monkeypatch.setattr(ct, "PROBE_SECONDS", 0.0)
    snaps = iter([(0.0, 0.0, 0.0), (200.0, 10.0, 0.0)])  # 1.9 cores busy, none of it ours
    monkeypatch.setattr(ct, "_snapshot", lambda: next(snaps))
    real, sampled_on = pairs_cli.make_pairs, []

    def make_pairs(*a, **k):
        sampled_on.append(torch.get_num_threads())
        return real(*a, **k)

    monkeypatch.setattr(pairs_cli, "make_pairs", make_pairs)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        r = cli_here("pairs", "--model", "arith-base", "--dataset", "arith", "--out", tmp_path / "pairs",
                     "--max-prompts", "2", "--max-heldout", "2", "--samples", "2", "--max-new-tokens", "8",
                     "--local-only", "--no-progress")
    finally:
        torch.set_num_threads(before)
    assert r.returncode == 0, r.stderr[-2000:]
    said = " ".join(r.stdout.split())
    assert sampled_on == [1] and "the machine is busy" in said and "using 1 CPU thread(s)" in said, said[-1500:]
    assert (tmp_path / "pairs" / "train.jsonl").is_file() or any((tmp_path / "pairs").iterdir())
