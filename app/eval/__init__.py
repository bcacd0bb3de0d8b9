"""Evaluation: base vs adapter on held-out rows or the user's prompts.

    result.py   the typed ``Comparison`` every view renders from (its ``to_dict`` is compare.json)
    heldout.py  the one held-out sampler (seeded by the run's own split seed)
    compare.py  the held-out rows and prompts, both sides' answers (the run's pair: app/model/pair.py), scored
    chat.py     chat with a run's adapter, its base or both; preference.py: held-out preference log-probs
    divergence.py   a distillation student's KL from its teacher on its held-out answers
    render.py   terminal table, --html page, the UI's summary and rows
    uncertainty.py  how sure a lift is: its paired bootstrap interval, McNemar's exact test, the rows to show it
    harness.py  `qlora-app eval`: lm-evaluation-harness on the base and the adapter (lm_tasks/: the shipped tasks)

Standard library only at import; torch / transformers / peft load inside the functions that need them.

Owns: running base and adapter on rows and scoring them (compare, chat, held-out preference log-probs); the asking
itself is app/ask's; making pairs from a model's answers is app/synth's.
Must not import the trainer (tests/structure/test_homes.py) nor write a run's config.yaml/status.json.
"""
