"""The run folder: what is in it, how it is made and written, and how it is read back.

    layout.py     file names, status words, metric keys: the contract between the engine and its readers (UI, runs)
    newrun.py     naming and making a new run folder (never over another's)
    store.py      atomic writes; status.json and metrics.jsonl
    integrity.py  which checkpoints are complete (a torn one is never resumed from)
    lookup.py     finding runs and adapters from what a user typed
    record.py     the run's record: the only writer of config.yaml and status.json, failure classification
    faults.py     how faults read (full disk, NaN)
    summary.py    one run in words and numbers (runs, the UI, the card)
    proof.py      a run's comparisons on disk (compare.json and comparisons/)
    benchmarks.py a run's general-ability evaluations on disk (evals/: lm-evaluation-harness, base vs adapter)
    curves.py     the curves figure (curves.png and the UI's live view)
    counts.py     a run's counts: reward failures, tool calls, judgements, handed to all that counts as one object
    diagnosis.py  why a run's reward is flat, read from the logged steps (live, and by `doctor RUN`)
    watch.py      the live run's diagnosis, and the withdrawal of a warning the run's learning contradicts

Owns: every file a run folder holds. Must not train, load models or import the trainers."""
