"""The held-out sampler: the rows an adapter was picked on (the evaluations during training, when it is their best
point) are left out of the figures that measure it."""

from app.run import layout


def test_the_proof_leaves_out_the_rows_that_picked_the_adapter():
    from datasets import Dataset

    from app.data.detect import detect_fields
    from app.eval.heldout import _indices, chosen_on_rows, sample_examples

    held = Dataset.from_list([{"question": f"q{i}", "answer": str(i)} for i in range(40)])
    det = detect_fields(held)
    picked = {r["prompt"] for r in sample_examples(held, det, 8, 5)}  # the evaluations' rows (seed = training's)
    proof = sample_examples(held, det, 40, 5, leave_out=_indices(held, det, 8, 5))
    assert len(proof) == 32 and not picked & {r["prompt"] for r in proof}
    assert chosen_on_rows({layout.EVAL_ROWS: 8}, _Path(layout.BEST_ADAPTER)) == 8
    assert chosen_on_rows({layout.EVAL_ROWS: 8, layout.ADAPTER_STEP: 3, "step": 7}, _Path(layout.ADAPTER)) == 8
    assert chosen_on_rows({layout.EVAL_ROWS: 8, layout.ADAPTER_STEP: 7, "step": 7}, _Path(layout.ADAPTER)) == 0
    assert chosen_on_rows({layout.EVAL_ROWS: 8}, _Path("checkpoint-4")) == 0


def _Path(name):
    from pathlib import Path

    return Path("/runs/r") / name
