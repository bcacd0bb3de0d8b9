"""Asking a model: the one service every answer a trained or base model gives goes through (``asking``: a request,
``Ask``, and one dispatcher, ``Asker``: pictures, a run's tool loop, or text; the generation settings checked once;
the one refusal of pictures for a model that reads none), and the log-probabilities of given answers (``logprobs``:
a held-out pair's chosen and rejected, as DPO reads them). Compare, the held-out points, chat, the API server, pairs
and off-policy distillation's teacher all ask through it; no other module calls generation
(tests/structure/test_one_door.py watches).

Owns asking. Must not score answers (app/rewards, app/eval), train, or write run folders; torch and transformers are
imported inside the generation functions it calls (app/model/generation.py)."""
