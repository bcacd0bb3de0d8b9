"""Log-probabilities as a model reads text: each token's (with its most likely alternatives) over one sequence
(``token_logprobs``: what `serve` returns for logprobs / top_logprobs / echo), and the summed log-probability of a
held-out pair's chosen and rejected answers after its prompt, as a model reads them: the prompt as training built it
(the run's system prompt and chat template), the answer as TRL's DPO tokenizes it (the assistant turn as the template
closes it, or the text and the end-of-sequence token without one), the pictures read with it on the image path. Asked
through app/ask/asking.Asker.logprobs; app/eval/preference.py turns base's and adapter's into preference accuracy.
torch is imported inside the functions.
"""

from __future__ import annotations

from app.model.generation import adds_special_tokens, format_prompt, pad_left
from app.model.vision import encode_with_images, image_prompt_text

BATCH = 4  # pairs per forward pass (x2 answers): a left-padded batch keeps only the answers' logits


def token_logprobs(model, ids: list[int], start: int, top: int = 0) -> list[tuple[int, float, list]]:
    """[(token id, its log-probability, [(alternative id, log-probability)] x ``top``, most likely first)] for the
    tokens of ``ids`` from ``start`` on (start >= 1: the first token has no context), each given the ones before it,
    from one forward pass; the values are the model's own (fp32 log-softmax of its logits)."""
    import torch

    start = max(1, start)
    if start >= len(ids):
        return []
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, start - 1:-1].float()
    logps = torch.log_softmax(logits, dim=-1)  # row j predicts token start + j
    targets = torch.tensor(ids[start:], device=logps.device)
    chosen = logps.gather(-1, targets[:, None])[:, 0].tolist()
    best = torch.topk(logps, min(top, logps.shape[-1])) if top else None
    return [(t, lp, list(zip(best.indices[j].tolist(), best.values[j].tolist())) if best is not None else [])
            for j, (t, lp) in enumerate(zip(ids[start:], chosen))]


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
    through app/ask/asking.Asker.logprobs, which sends items with pictures to ``image_logprobs``)."""
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
