"""Training data made by asking a model (it makes data; app/eval proves adapters):

    pairs.py    `qlora-app pairs`: sample a model (a base, or a run's adapter as it trained), score each answer with
                the shaped reward, write chosen / rejected pairs DPO, ORPO and KTO train on

Asks through app/ask (one service asks a model); reads data through app/data, scores through app/rewards.
Owns: the pairs folder's format and its manifest (app/data/loading.PAIRS_MANIFEST names it). Must not import the
trainer nor the evaluation package (tests/structure/test_architecture.py), nor write a run's config.yaml/status.json.
"""
