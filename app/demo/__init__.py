"""The offline demo: built-in arith data (and shapes images), a tiny shipped base model, and the end-to-end run (GRPO,
DPO or SFT on images), each through the one Session: choose.py (which demo a request runs), run.py (the story),
recipe.py (its settings), dpo.py (the DPO demo's pairs), images.py (the image demo), build_base.py,
build_tools_base.py and build_vision_base.py (the scripts that pretrain the shipped bases).

Owns: the demo's recipes and its printed story. Must not train any other way."""
