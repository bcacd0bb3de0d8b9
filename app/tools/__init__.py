"""The tools a model calls while it answers: the built-in ones (``builtin``), the user's tool files and
environments, loaded and checked before any model loads (``toolbox``), the guard around every call (``guard``:
timeout, error results, output cap, per-tool counts) and the tool loop that chat, compare and the held-out
evaluation run (``loop``), the same one a GRPO rollout runs inside TRL.

Owns: what a tool is and how one call is made safely. Must not train (TRL's GRPOTrainer runs the rollouts:
app/train/methods/grpo.py) nor write a run's records (the run reports the counts: app/train/running/session.py).
"""
