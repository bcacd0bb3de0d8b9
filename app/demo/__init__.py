"""The offline demo: built-in arith data, a tiny shipped base model, and the end-to-end run."""
