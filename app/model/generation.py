"""Text generation from a loaded model: the prompt as training built it, the decoding arguments, left-padded batches
(``pad_left``: the one padding of every batch a model reads here, generation's, the tool loop's, the local judge's and
the preference log-probabilities'), prompts cut to the context (``fit_prompt``), streaming and stopping. The one
generation path of compare, the held-out evaluation during training, chat and export's checks, so a greedy answer is
the same wherever it is asked for.

When are two greedy answers to the same prompt equal? Always when they are generated in batches of the same shape:
chat generates one prompt at a time, as compare does with ``batch_size=1``. On a CPU (fp32) a left-padded batch
gives the rows the same answers too; on a GPU in bf16 / fp16 the padded batch runs other kernel shapes, whose
rounding can flip a near-tie between two tokens, so a batched answer may differ from the one-at-a-time one.

Owns: generation and its batching. Must not load models (app/model/source.py) or score answers (app/rewards). Only the
standard library at module level; torch / transformers are imported inside the functions.
"""

from __future__ import annotations

from typing import Callable

from app.errors import UserError
from app.model.placement import context_length
from app.model.vision import encode_with_images, image_prompt_text


def format_prompt(tok, item: dict) -> str:
    """The exact text training put before a completion: the chat template with a generation prompt when the
    tokenizer has one (TRL does the same with conversational prompts), else the plain prompt."""
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template(item["messages"], tokenize=False, add_generation_prompt=True)
    return item["plain"]


def adds_special_tokens(tok) -> bool:
    """Whether prompts are tokenized with the tokenizer's special tokens: the chat template already adds BOS where
    the model wants it; adding special tokens again would double it."""
    return not getattr(tok, "chat_template", None)


def prompt_room(model, max_new_tokens: int) -> int | None:
    """How many prompt tokens fit beside max_new_tokens in the model's context (None: the config does not say)."""
    context = context_length(model.config)
    if context is None:
        return None
    if max_new_tokens >= context:
        raise UserError(f"--max-new-tokens {max_new_tokens} fills the model's whole {context}-token context; "
                        f"set it below {context}")
    return context - max_new_tokens


def decoding(model, tok, max_new_tokens: int, temperature: float) -> dict:
    """generate()'s decoding arguments: greedy at temperature 0, else plain sampling (no top-k / top-p: the
    distribution the temperature gives)."""
    eos = model.generation_config.eos_token_id
    gen_kw = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                  eos_token_id=eos if eos is not None else tok.eos_token_id)
    if temperature > 0:
        gen_kw.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
    else:
        gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    return gen_kw


def pad_id(tok) -> int:
    """The id padding is written with: the tokenizer's pad token, else its end of sequence, else 0 (the mask hides it
    either way)."""
    for t in (tok.pad_token_id, tok.eos_token_id):
        if isinstance(t, int):
            return t
    return 0


def pad_left(tok, rows: list[list[int]], positions: bool = False) -> dict:
    """A batch of token id rows, left-padded as TRL's ``pad`` pads (ids in; padded ids and mask out):
    ``input_ids`` and ``attention_mask`` and, with ``positions``, ``position_ids`` counted from each row's first real
    token (a forward pass outside ``generate`` must not shift a padded row's positions; ``generate`` derives them
    from the mask itself). The caller's tokenizer is never touched: a tokenizer set to left padding here would pad
    training's batches on the left too. torch's own ``pad_sequence``, not TRL's: importing TRL costs a chat or a
    compare seconds for nothing else."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    def pad(seqs, value):
        return pad_sequence(seqs, batch_first=True, padding_value=value, padding_side="left")

    ids = pad([torch.tensor(r, dtype=torch.long) for r in rows], pad_id(tok))
    mask = pad([torch.ones(len(r), dtype=torch.long) for r in rows], 0)
    out = {"input_ids": ids, "attention_mask": mask}
    if positions:
        out["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
    return out


def fit_prompt(tok, ids: list[int], room: int | None) -> tuple[list[int], bool]:
    """(ids, cut): a prompt longer than ``room`` keeps its end (where the question and the generation prompt are),
    and its leading BOS when it has one; ``room`` None: the context is unknown, nothing is cut."""
    if room is None or len(ids) <= room:
        return ids, False
    head = 1 if ids and tok.bos_token_id is not None and ids[0] == tok.bos_token_id and room > 1 else 0
    return ids[:head] + ids[len(ids) - (room - head):], True


def _new_tokens(tok, row) -> list[int]:
    return [t for t in row.tolist() if t != tok.pad_token_id]


def decode(tok, ids: list[int]) -> str:
    """An answer's text as every caller shows it: special tokens dropped, surrounding space stripped."""
    return tok.decode(ids, skip_special_tokens=True).strip()


def run_batch(model, tok, enc: dict, gen_kw: dict, streamer=None, stopping=None):
    """One model.generate call on an encoded, left-padded batch; the new tokens of each row (the one place the
    model generates)."""
    import torch

    device = next(model.parameters()).device
    enc = {k: v.to(device) for k, v in enc.items()}
    extra = {"streamer": streamer} if streamer is not None else {}
    if stopping is not None:
        extra["stopping_criteria"] = stopping
    extra.update(no_router_loss(model))
    with torch.inference_mode():
        seqs = model.generate(**enc, **gen_kw, **extra)
    return seqs[:, enc["input_ids"].shape[1]:]


def no_router_loss(model) -> dict:
    """generate()'s keyword that keeps a MoE model from computing its load-balancing loss while generating: TRL
    sets output_router_logits in the config for training, and with a KV cache transformers' loss then multiplies
    the new tokens' router weights by the whole attention mask and fails (Qwen3-MoE: size 20 vs 520)."""
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    return {"output_router_logits": False} if getattr(text, "output_router_logits", None) is not None else {}


def generate(model, tok, texts: list[str], max_new_tokens: int = 128, temperature: float = 0.0,
             batch_size: int = 16, seed: int = 0, on_batch: Callable[[int], None] | None = None) -> list[dict]:
    """Left-padded batched generation. Returns [{text, tokens, prompt_cut}] in the order of ``texts``.

    Rows are batched by prompt length (longest first) so a batch carries little padding; greedy unless
    temperature > 0, and sampling is seeded so a comparison can be re-run. A prompt longer than the model's
    context leaves beside max_new_tokens keeps its end (where the question and the generation prompt are) and is
    marked prompt_cut."""
    room = prompt_room(model, max_new_tokens)
    add_special = adds_special_tokens(tok)
    prompts = [fit_prompt(tok, tok(t, add_special_tokens=add_special)["input_ids"], room) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -len(prompts[i][0]))
    return _in_batches(model, tok, order, lambda idx: pad_left(tok, [prompts[i][0] for i in idx]),
                       [cut for _, cut in prompts], max_new_tokens, temperature, batch_size, seed, on_batch)


def _in_batches(model, tok, order: list[int], encode: Callable[[list[int]], dict], cut: list[bool],
                max_new_tokens: int, temperature: float, batch_size: int, seed: int,
                on_batch: Callable[[int], None] | None) -> list[dict]:
    """The batch loop of ``generate`` and ``generate_with_images``: the rows in ``order``, ``batch_size`` at a time,
    each batch made by ``encode(row indices)``; [{text, tokens, prompt_cut}] in the rows' own order."""
    import torch

    gen_kw = decoding(model, tok, max_new_tokens, temperature)
    torch.manual_seed(seed)
    out: list[dict | None] = [None] * len(order)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        new = run_batch(model, tok, encode(idx), gen_kw)
        for row, i in enumerate(idx):
            ids = _new_tokens(tok, new[row])
            out[i] = {"text": decode(tok, ids), "tokens": len(ids), "prompt_cut": cut[i]}
        if on_batch:
            on_batch(len(idx))
    return out  # type: ignore[return-value]


def generate_with_images(model, processor, items: list[dict], max_new_tokens: int = 128, temperature: float = 0.0,
                         batch_size: int = 16, seed: int = 0, on_batch: Callable[[int], None] | None = None
                         ) -> list[dict]:
    """``generate`` for prompts with images (each item's ``messages`` and ``images``): the processor renders and
    encodes each left-padded batch (the images where training placed them, app.model.vision.with_images), longest
    prompts first, the same decoding. A prompt with images is never cut (cutting an image's tokens breaks the
    model's input): prompt_cut is False."""
    tok = processor.tokenizer
    texts = [image_prompt_text(processor, it["messages"], it["images"]) for it in items]
    order = sorted(range(len(items)), key=lambda i: -len(texts[i]))
    return _in_batches(model, tok, order,
                       lambda idx: encode_with_images(processor, [texts[i] for i in idx],
                                                      [items[i]["images"] for i in idx]),
                       [False] * len(items), max_new_tokens, temperature, batch_size, seed, on_batch)


def generate_ids(model, tok, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> list[list[int]]:
    """One left-padded batch from token ids (the tool loop's rounds: app/tools/loop.py): each row's new tokens up to
    and with its first end-of-turn token, as a training rollout's completion ends."""
    import torch

    gen_kw = decoding(model, tok, max_new_tokens, temperature)
    eos = gen_kw["eos_token_id"]
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
    torch.manual_seed(seed)
    new = run_batch(model, tok, pad_left(tok, prompt_ids), gen_kw)
    out = []
    for row in new.tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), None)
        out.append(row if cut is None else row[:cut + 1])
    return out


def generate_one(model, tok, ids: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 on_text: Callable[[str], None] | None = None, stop=None) -> tuple[str, list[int]]:
    """One prompt's answer (token ids in; its text and the token ids generated out, the end-of-sequence token
    included where one was), streamed piece by piece to ``on_text`` and ended early when the ``stop`` event is set:
    chat's path. The same batch of one that ``generate`` runs at batch_size=1."""
    import threading

    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

    class _Stop(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), bool(stop and stop.is_set()), dtype=torch.bool,
                              device=input_ids.device)

    enc = pad_left(tok, [ids])
    streamer = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
    out: dict = {}

    def run():
        try:
            torch.manual_seed(seed)
            out["new"] = run_batch(model, tok, enc, decoding(model, tok, max_new_tokens, temperature), streamer,
                                   StoppingCriteriaList([_Stop()]))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out["error"] = e
            streamer.end()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    started = False
    for piece in streamer:
        if not started:  # the reply is shown stripped, as decode() strips answers
            piece = piece.lstrip()
            started = bool(piece)
        if on_text and piece:
            on_text(piece)
    worker.join()
    if "error" in out:
        raise out["error"]
    new = _new_tokens(tok, out["new"][0])
    return decode(tok, new), new
