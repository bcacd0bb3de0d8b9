"""The offline demo: built-in arith data (and shapes images), a tiny shipped base model, and the end-to-end run (GRPO,
DPO, distillation or SFT on images), each through the one Session: choose.py (which demo a request runs), run.py (the
story), recipe.py (its settings), dpo.py (the DPO demo's pairs), distill.py (the distillation demo), images.py (the
image demo), build_base.py, build_tools_base.py, build_vision_base.py and build_teacher.py (the scripts that pretrain
the shipped bases and the distillation demo's teacher).

Owns: the demo's recipes and its printed story. Must not train any other way."""
