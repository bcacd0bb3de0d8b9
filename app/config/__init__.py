"""The one configuration object shared by the CLI, the UI and the presets.

    schema.py             the sections and their fields (pydantic), the methods, the loss families
    data_section.py       the data section: one dataset or a mix of them (data.mix), each with its own fields
    build.py              defaults < preset < flags < --set, validated once, with paths made absolute
    resolve.py            what "auto" becomes for a method ("LoRA Without Regret" defaults), the run's warnings
    keys.py               dotted keys: --set parsing, suggestions for a mistyped key, --explain rows, differences
    flags.py              the one option -> config key -> UI widget table (CLI `train` and the Train form)
    presets.py            the shipped presets (presets/)
    reward_components.py  the shaped reward's components: names, default weights, ranges, plot colours
    builtin.py            where the tiny built-in base model lives
    fields.py             the sections' building blocks, and the one walk of a dotted key (get_key / set_key)
    methods/              what each training method is, one module each (its rows, sampling, reward, teacher,
                          defaults, warnings, checks, card line, demo): asked, never compared by name
    method_sections.py    the sections one method reads (GRPO with its tools, DPO)
    reward_section.py     the reward's section, beside its table
    help.py               --explain's help per key, each method's auto value stated

Owns: every setting's name, default and validation message. Must not import torch, transformers, datasets or
gradio (the CLI loads it for --help), nor read data or models."""
