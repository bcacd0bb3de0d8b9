"""`qlora-app`: every command and all terminal rendering.

    main.py         the typer app, `train`, `inspect`, `score`, `compare`, `demo`, `ui`, `presets`, `runs`,
                    `doctor`, and the entry point (process-wide settings first: app/host/process.py)
    ship.py         `chat`, `export`, `push`, `prefetch`;  pairs.py: `pairs`
    inspect.py, score.py, compare.py
                    those commands' bodies;  plan_report.py: the dry run's plan and the runs tables
    doctor.py       what this machine can do;  options.py: option shapes (switches)
    evaluate.py     `eval`: lm-evaluation-harness on a run's base and adapter

`python -m app.cli` runs the same entry (__main__.py). Owns: turning options into a request and printing results.
Must not train, plan or write a run folder (the session does); module tops stay light for --help."""
