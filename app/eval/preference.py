"""Preference accuracy on held-out pairs: does the model prefer the chosen answer to the rejected one, base (adapter
off) vs adapter?

For each held-out pair, the summed log-probability of the chosen and of the rejected answer after the prompt (the
prompt as training built it: the run's system prompt and chat template; the answer as TRL's DPO tokenizes it: the
assistant turn as the template closes it, or the text and the end-of-sequence token without one). Then, in the
words of app.run.layout.PREFERENCE_WORDS (one definition per name, as TRL's are during training):
  - reward margin: DPO's implicit reward of chosen minus rejected, beta x ((adapter - base) of chosen - (adapter -
    base) of rejected), as TRL's rewards/margins; preference accuracy: the share of pairs above 0, as TRL's
    rewards/accuracies;
  - chosen more likely (per side): the share of pairs where chosen is more likely than rejected.
Used by the held-out evaluation during training (app/train/running/heldout_eval.py) and by the proof at the end
(app/eval/compare.py). torch is imported inside the functions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from app.model.generation import adds_special_tokens, format_prompt, pad_left
from app.model.pair import base_side
from app.model.vision import encode_with_images, image_prompt_text

BATCH = 4  # pairs per forward pass (x2 answers): a left-padded batch keeps only the answers' logits


def answer_text(tok, item: dict, answer: str, prompt: str) -> str:
    """The answer's text after the prompt (``format_prompt(tok, item)``) exactly as DPO's data renders it."""
    if getattr(tok, "chat_template", None):
        full = tok.apply_chat_template([*item["messages"], {"role": "assistant", "content": answer}], tokenize=False)
        if full.startswith(prompt):
            return full[len(prompt):]
        return answer
    return "\n" + answer + (tok.eos_token or "")


def _encode(tok, item: dict) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) of the chosen and of the rejected answer: the prompt rendered once for both."""
    text = format_prompt(tok, item)
    prompt = tok(text, add_special_tokens=adds_special_tokens(tok))["input_ids"]
    return [(prompt, tok(answer_text(tok, item, ans, text), add_special_tokens=False)["input_ids"])
            for ans in item["pair"]]


def text_logprobs(model, tok, items: list[dict]) -> list[tuple[float, float]]:
    """(chosen, rejected) summed log-probabilities for each item with a "pair" (chosen, rejected), in order (asked
    through app/eval/asking.Asker.logprobs, which sends items with pictures to ``image_logprobs``)."""
    import torch

    seqs = [seq for it in items for seq in _encode(tok, it)]
    device = next(model.parameters()).device
    out: list[float] = []
    for i in range(0, len(seqs), 2 * BATCH):
        chunk = seqs[i:i + 2 * BATCH]
        keep = max(len(a) for _, a in chunk) + 1  # logits of the answer tokens only (left padding: the last ones)
        inputs = {k: v.to(device) for k, v in pad_left(tok, [p + a for p, a in chunk], positions=True).items()}
        with torch.no_grad():
            try:
                logits = model(**inputs, logits_to_keep=keep).logits
            except TypeError:  # a model without logits_to_keep: all of them, then the answers'
                logits = model(**inputs).logits
        logits = logits[:, -keep:].float()
        logps = torch.log_softmax(logits[:, :-1], dim=-1)  # position j predicts token j + 1
        for r, (_, a) in enumerate(chunk):
            targets = torch.tensor(a, device=logps.device)
            rows = logps[r, keep - 1 - len(a):]
            out.append(float(rows.gather(-1, targets[:, None]).sum()))
    return list(zip(out[0::2], out[1::2]))


def image_logprobs(model, tok, processor, items: list[dict]) -> list[tuple[float, float]]:
    """``text_logprobs`` of prompts with images: each prompt + answer encoded by the processor with the item's
    images, one sequence at a time (so the answer's tokens are the sequence's last ones, with no padding to track)."""
    import torch

    device = next(model.parameters()).device
    out = []
    for it in items:
        text = format_prompt(tok, it)
        prompt = image_prompt_text(processor, it["messages"], it["images"])
        sums = []
        for ans in it["pair"]:
            suffix = answer_text(tok, it, ans, text)
            answer = tok(suffix, add_special_tokens=False)["input_ids"]
            enc = {k: v.to(device) for k, v in encode_with_images(processor, [prompt + suffix], [it["images"]]).items()}
            with torch.no_grad():
                logits = model(**enc).logits[0, -len(answer) - 1:-1].float()
            targets = enc["input_ids"][0, -len(answer):]
            sums.append(float(torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum()))
        out.append((sums[0], sums[1]))
    return out


@dataclass
class PreferenceSummary:
    n: int  # held-out pairs
    accuracy: float  # preference accuracy: share of pairs with a positive implicit reward margin (rewards/accuracies)
    margin: float  # reward margin: the mean implicit reward margin (rewards/margins)
    base_likelier: float  # chosen more likely: share of pairs where the base (adapter off) finds chosen more likely
    adapter_likelier: float  # the same for the adapter
    beta: float

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(base: list[tuple[float, float]], adapter: list[tuple[float, float]], beta: float) -> PreferenceSummary:
    margins = [beta * ((ac - bc) - (ar - br)) for (bc, br), (ac, ar) in zip(base, adapter)]
    n = len(margins)
    return PreferenceSummary(n=n, accuracy=sum(m > 0 for m in margins) / n, margin=sum(margins) / n,
                             base_likelier=sum(c > r for c, r in base) / n,
                             adapter_likelier=sum(c > r for c, r in adapter) / n, beta=beta)


def compare_pairs(asker, items: list[dict], beta: float, base: list | None = None):
    """(PreferenceSummary, the base's log-probs) of the items that hold a pair, or (None, None) when none does.
    ``asker``: the run's PEFT model as app/eval/asking.Asker asks it (its ``logprobs``); ``base``: the base's
    log-probs from an earlier call (they do not change while the adapter trains)."""
    pairs = [it for it in items if it.get("pair")]
    if not pairs:
        return None, None
    if base is None:
        with base_side(asker.model):
            base = asker.logprobs(pairs)
    adapter = asker.logprobs(pairs)
    return summarize(base, adapter, beta), base
