"""The offline demo: built-in arith data, a tiny shipped base model, and the end-to-end run (GRPO or DPO), each
through the one Session. Owns: the demo's recipes and its printed story. Must not train any other way."""
