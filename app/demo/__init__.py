"""The offline demo: built-in arith data, a tiny shipped base model, and the end-to-end run (GRPO or DPO), each
through the one Session: run.py (the story), recipe.py (its settings), dpo.py (the DPO demo's pairs), build_base.py
and build_tools_base.py (the scripts that pretrain the shipped bases).

Owns: the demo's recipes and its printed story. Must not train any other way."""
