"""A local judge model, loaded by qlora-app in 4-bit beside the model being trained.

It is not asked to write: its answer is prefilled up to ``{"score": `` and the score is read from the probabilities of
its next token (G-Eval's probability-weighted score): the expected value of 0..10 under the model, divided by 10. One
forward pass per batch of ``judge.batch_size`` completions (a second one only where "10" is two tokens); no free text,
so nothing to misread. A judge that puts almost no probability on any score (``MIN_MASS``) is unreadable for that
completion (None, counted).
"""

from __future__ import annotations

from app.config.schema import ModelConfig
from app.model.generation import adds_special_tokens, pad_left
from app.model.load import load_base_model
from app.model.placement import context_length
from app.rewards.judge.rubric import SCALE

PREFILL = '{"score": '
MIN_MASS = 1e-3  # below this much probability on the score tokens, the judge is not answering with a score


class LocalJudge:
    """``judge_many(texts)`` -> [(score | None, failure | None)] from a model loaded on first use."""

    def __init__(self, judge_cfg, local_only: bool = False, device: str = "auto"):
        self.cfg, self.local_only, self.device = judge_cfg, local_only, device
        self._model = self._tok = None
        self.last_failure = ""

    def __getstate__(self):  # the model is not copied: a process that unpickles this loads its own on first use
        return {"cfg": self.cfg, "local_only": self.local_only, "device": self.device, "_model": None, "_tok": None,
                "last_failure": ""}

    def _load(self):
        mc = ModelConfig(name_or_path=self.cfg.model)
        self._model, self._tok, _ = load_base_model(mc, self.local_only, for_training=False, device=self.device)
        self._digits = self._score_tokens(self._tok)

    @staticmethod
    def _score_tokens(tok) -> dict[int, list[int]]:
        """{score: token ids that write it in one token}, with and without a leading space; "10" may have none."""
        out: dict[int, list[int]] = {}
        for k in range(SCALE + 1):
            ids = {ids[0] for v in (str(k), f" {k}") if len(ids := tok.encode(v, add_special_tokens=False)) == 1}
            if ids:
                out[k] = sorted(ids)
        return out

    def _prompt_ids(self, text: str) -> list[int]:
        tok = self._tok
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                           add_generation_prompt=True)
        else:
            text = f"{text}\n"
        ids = tok.encode(text + PREFILL, add_special_tokens=adds_special_tokens(tok))
        room = context_length(self._model.config)
        return ids[-(room - 1):] if room and len(ids) >= room else ids  # the rubric's end (the ask) is kept

    def _next_probs(self, rows: list[list[int]]):
        """Next-token probabilities after each row (left-padded batch, positions counted from each row's start)."""
        import torch

        batch = {k: v.to(self._model.device) for k, v in pad_left(self._tok, rows, positions=True).items()}
        with torch.no_grad():
            logits = self._model(**batch, use_cache=False, logits_to_keep=1).logits[:, -1, :]
        return torch.softmax(logits.float(), dim=-1)

    def judge_many(self, texts: list[str]) -> list[tuple[float | None, str | None]]:
        if self._model is None:
            self._load()
        out = []
        for i in range(0, len(texts), self.cfg.batch_size):
            out += self._judge_batch(texts[i:i + self.cfg.batch_size])
        return out

    def _judge_batch(self, texts: list[str]) -> list[tuple[float | None, str | None]]:
        rows = [self._prompt_ids(t) for t in texts]
        probs = self._next_probs(rows)
        mass = {k: probs[:, ids].sum(-1) for k, ids in self._digits.items()}
        if SCALE not in mass and 1 in mass:  # "10" is "1" then "0": split the "1"s by what the judge writes next
            one = self._digits[1][0]
            zero = self._digits.get(0)
            if zero:
                after = self._next_probs([r + [one] for r in rows])[:, zero].sum(-1)
                mass[SCALE] = mass[1] * after
                mass[1] = mass[1] - mass[SCALE]
        results = []
        for row in range(len(texts)):
            total = sum(float(m[row]) for m in mass.values())
            if total < MIN_MASS:
                self.last_failure = f"the judge puts {total:.1e} of its probability on a score"
                results.append((None, "unreadable"))
                continue
            expected = sum(k * float(m[row]) for k, m in mass.items()) / total
            results.append((round(expected / SCALE, 4), None))
        return results
