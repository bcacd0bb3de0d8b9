"""qlora-app: QLoRA fine-tuning (SFT, GRPO, DPO; ORPO experimental) on one consumer GPU, with a CLI and a local UI.

The packages are the layers, lowest first (tests/test_architecture.py enforces it: a module imports its own layer
and the ones below, never one above; docs/architecture.md draws it):

    host     this machine and this process: device facts, offline switches, CPU threads and allocator, child
             processes, the library versions a job needs, process-wide settings at the entry points
    config   the one AppConfig: schema, building and resolving, dotted keys, the option table, presets
    run      the run folder: its file contract, creating it, atomic writes, checkpoint integrity, lookup,
             the record (the only writer of config.yaml / status.json), summaries, proof, curves
    data, rewards, model
             datasets and their fields; the shaped reward; where a model comes from, how it is placed, loaded,
             given LoRA and asked to generate
    train, eval, export
             the session and everything it plans and builds; compare, chat and pairs; getting an adapter out
    demo, ui the offline demo; the web UI (which runs the CLI in a subprocess)
    cli      every command and all terminal rendering

Only ``errors`` sits beside them: the two exceptions every layer raises."""

__version__ = "0.1.0"
