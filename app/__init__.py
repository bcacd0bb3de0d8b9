"""qlora-app: QLoRA fine-tuning (GRPO, SFT, DPO, KTO and distillation; ORPO experimental) on one consumer GPU,
with a CLI and a local UI.

The packages are the layers, lowest first (tests/structure/test_architecture.py enforces it: a module imports its own
layer and the ones below, never one above; docs/architecture.md draws it):

    host                    this machine and this process: device facts, offline switches, CPU threads and
                            allocator, child processes, the library versions a job needs, process-wide settings at
                            the entry points
    config                  the one AppConfig: schema, building and resolving, dotted keys, the option table, presets
    run                     the run folder: its file contract, creating it, atomic writes, checkpoint integrity,
                            lookup, the record (the only writer of config.yaml / status.json), a run's counts,
                            summaries, proof, curves, the diagnosis
    data, rewards, model, tools
                            datasets and their fields; the shaped reward; where a model comes from, how it is placed,
                            loaded, paired with an adapter, given LoRA and asked to generate; the tools a model calls
                            and the guard around them
    ask                     the one service that asks a model: a request, pictures, a run's tool loop, or text
    train, eval, export, synth, teacher
                            the session and everything it plans and builds; compare, chat and the harness; getting
                            an adapter out; training data made by asking a model (pairs); a distillation teacher
                            outside the training process (a GGUF in llama.cpp's child, an endpoint)
    demo, ui, serve         the offline demo; the web UI (which runs the CLI in a subprocess); the OpenAI-compatible
                            API server
    cli                     every command and all terminal rendering

Only ``errors`` sits beside them: the two exceptions every layer raises."""

__version__ = "0.1.0"
