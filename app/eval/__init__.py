"""Evaluation: base vs adapter on held-out rows or the user's prompts.

    result.py   the typed ``Comparison`` every view renders from (its ``to_dict`` is compare.json)
    heldout.py  the one held-out sampler (seeded by the run's own split seed)
    compare.py  resolve the adapter's base, generate both sides, score them
    render.py   terminal table, --html page, the UI's summary and rows
    cli.py      `qlora-app compare`

Standard library only at import; torch / transformers / peft load inside the functions that need them.
"""
