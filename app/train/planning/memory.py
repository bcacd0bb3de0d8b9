"""Will this run fit my GPU? The peak GPU memory of a run plan, term by term, before any weights load.

The estimate is of the plan that runs: app/train/planning/plan.py passes its decisions (``Decisions``: compute dtype,
SFT packing, the GRPO sampler and its weight copy, the generation batch, activation offloading, backend). Two figures:
  - ``torch_peak_gb``: what torch's caching allocator holds at the peak (torch.cuda.max_memory_reserved, which a run
    records as peak_mem_reserved_gib);
  - ``total_gb``: that, plus what the card holds outside torch's pool: the CUDA context and the 8-bit optimizer's
    paged states. The fit check and the per-card verdicts use it.

Terms (bytes; d = bytes per value of the compute dtype, 2 for bf16 / fp16):
  weights    linear layers in 4-bit NF4: 0.5 byte per weight + quantization constants (one fp32 absmax per 64 weights,
             about 1/64 byte with double quantization); embeddings and the LM head stay dense at d (bitsandbytes does
             not quantize them). A base loaded without 4-bit: d per weight.
  adapter    LoRA weights and gradients at d (TRL casts a 4-bit base's adapter to bf16; fp32 compute keeps fp32, and so
             does PEFT on a base not in 4-bit); 8-bit paged AdamW keeps 2 bytes per parameter: in torch's pool for
             tensors under 1e5 elements, paged outside it (total only) for larger ones.
  copy       GRPO's sampling copy: merged = the linear layers at d (embeddings, norms and head are shared); vLLM = all
             weights.
  training   t tokens per micro-batch. Checkpointed layer inputs (t x hidden x d per layer; none when offloaded), then
             the larger of: one layer recomputed in backward (t x (17.3 hidden + 8.1 intermediate) bytes at d = 2,
             measured with saved-tensor hooks on a 4-bit Qwen2 layer with LoRA on every linear layer, re-measured in
             tests/train/planning/test_memory.py; plus its gradient buffers, t x intermediate x 2d, and one dequantized
             weight) or
             TRL's fused LM head (tiles of 4096 tokens x 32768 vocabulary entries at d, and the fp32 gradient of the
             hidden states). Without checkpointing every layer keeps what it saves.
  generation GRPO: the KV cache of every completion sampled at once (prompt width rounded up to 64 for the compiled
             static cache) and the prefill's MLP intermediates; or, for the merged copy, the refresh of its largest
             matrix in fp32. It does not overlap the backward pass: the peak takes the larger phase.
  judge      a local judge model (reward.judge.model): its 4-bit weights, resident, and one no-grad judging pass
             (judge.batch_size rows of prompt + completion + rubric: one layer's intermediates, last-position logits),
             after sampling: on top of a compiled sampler's static KV cache (still allocated), else in its freed
             blocks; never beside the backward pass. Measured on an H200 (docs/performance.md, "judge and diagnosis").
  teacher    distillation: the teacher's weights and its no-grad forward (app/train/planning/teacher.py); the student
             samples a whole generation batch with the training model (the generation term).
  reserve    0.25 GB the caching allocator holds beyond live tensors (cuBLAS workspaces, its 2 MB / 20 MB blocks).
  context    0.5 GB of CUDA context (total only).
Tokens come from the data's real lengths when known (SFT padded: the 95th percentile row; packed: full rows; GRPO:
the 95th percentile prompt + max_completion_length; DPO: twice the 95th percentile prompt + longer answer per pair,
chosen and rejected in one pass; the reference is the base with the adapter off, no second copy, and its no-grad
forward is smaller than the backward pass). Calibrated on one H100 (docs/performance.md; the measured
table is test data in tests/train/planning/test_memory.py). An estimate, meant to catch "this cannot fit" before a
20-minute download and to size the plan, not to replace a try. Owns these terms; must not decide anything (the plan
does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.config.fields import get_key
from app.config.methods import method_of
from app.host.machine import an
from app.model.shape import embed_params, linear_sizes, model_shape
from app.train.planning.batching import PROMPT_MULTIPLE, steps_per_generation
from app.train.planning.teacher import teacher_bytes
from app.train.planning.weights import census_bytes, weight_bytes

GB = 1024**3
CARDS_GB = (8, 12, 16, 24, 48, 80)  # the verdicts the UI and --dry-run show
CUDA_CONTEXT_GB = 0.5
ALLOCATOR_RESERVE_GB = 0.25
FIT_MARGIN = 0.90  # above 90 % of the card is "tight": other processes and spikes need room
# One vocabulary for a card's verdict, the same words in the text, `train --dry-run --json` and the UI.
VERDICTS = {
    "fits": "fits, with at least 10% of the card to spare",
    "tight": "fits, but above 90% of the card: another program on the GPU or a spike can push it over",
    "fits with changes": "fits once the plan changes a setting or drops a fast path, as its notes say",
    "too big": "does not fit",
    "unknown": "the model's size is unknown",
}
GRPO_PROMPT_TOKENS = 256  # a typical chat-templated GSM8K prompt, when the data's lengths are not known
LOGIT_TILE_TOKENS, LOGIT_TILE_VOCAB = 4096, 32768  # TRL's fused LM head tile (trl/kernels/chunked_logprob.py)
SAVED_PER_HIDDEN, SAVED_PER_INTERMEDIATE = 17.3, 8.1  # bytes saved per token of one decoder layer at 2-byte dtype
PAGED_MIN_ELEMENTS = 100_000  # bitsandbytes pages an optimizer state from this many elements up


@dataclass(frozen=True)
class Decisions:
    """What the estimate reads of a run plan (app/train/planning/plan.py decides them). None: as the config says
    (packing auto = packed; sampler auto = the merged copy, what a GPU plan takes where it fits)."""

    cuda: bool = True
    dtype: str = "bf16"  # the compute dtype
    packing: bool | None = None  # SFT
    sampler: str | None = None  # GRPO: plain | merged | vllm
    completions_at_once: int | None = None  # GRPO's generation batch; None: the config's (auto)
    compiled: bool | None = None  # a static-cache sampler (prompt width rounded up to 64); None: merged on CUDA
    offloading: bool = False  # checkpointed activations in CPU memory (SFT offloading, Unsloth's checkpointing)
    vision_params: int = 0  # a run on images: the vision side's parameters, loaded in 16-bit beside the 4-bit LM
    census: Any = None  # a mixture-of-experts model counted as it loads (app.model.experts.Census); None: dense
    model_files: Any = None  # the plan's app.model.files.ModelFiles (config.json read once); None: read here
    teacher: Any = None  # a distillation run's teacher (app.train.planning.teacher.TeacherPlan)


def _lora_tensors(s: dict, r: int, target_modules) -> list[int]:
    """Element counts of every LoRA A and B matrix (all-linear; a list of names scales by its share of 7)."""
    share = 1.0 if target_modules == "all-linear" or not isinstance(target_modules, list) else min(
        1.0, len(target_modules) / 7)
    sizes = [n for a, b in linear_sizes(s) for n in (r * a, r * b)]
    return [n for n in sizes for _ in range(round(s["layers"] * share))]


def lora_param_count(s: dict, r: int, target_modules) -> int:
    return sum(_lora_tensors(s, r, target_modules))


def lora_bytes_per_param(cuda: bool, dtype_bytes: int = 4) -> int:
    """Weight + gradient + AdamW's two moments per LoRA parameter: 8-bit AdamW on a GPU (2 bytes), fp32 AdamW on a
    CPU (8)."""
    return 2 * dtype_bytes + (2 if cuda else 8)


def adapter_bytes(s: dict, cfg, cuda: bool, d: int) -> tuple[float, float]:
    """(in torch's pool, paged outside it): LoRA weights, gradients and optimizer states."""
    tensors = _lora_tensors(s, cfg.lora.r or 16, cfg.lora.target_modules)
    # TRL casts a 4-bit base's adapter to bf16 on a GPU; fp32 compute (our CPU path) and PEFT's own default keep fp32
    w = d if cuda and cfg.model.load_in_4bit else 4
    if not cuda:
        return sum(tensors) * lora_bytes_per_param(False, w), 0.0
    paged = sum(n for n in tensors if n >= PAGED_MIN_ELEMENTS)
    return sum(tensors) * 2 * w + (sum(tensors) - paged) * 2, paged * 2.0


def micro_batch_tokens(cfg, lengths: list[int] | None, packing: bool) -> int:
    """Tokens in one micro-batch. SFT packed: full rows (as far as the data reaches); SFT padded: the 95th
    percentile row (max_length when the lengths are unknown); GRPO: every completion at max_completion_length after
    a 95th percentile prompt; DPO: two padded 95th percentile pairs' sides (chosen and rejected) per pair."""
    t = cfg.training
    batch = t.per_device_train_batch_size or 1
    method = method_of(cfg)
    if method.samples:  # sampled answers after prompts
        return batch * (_p95(lengths) or GRPO_PROMPT_TOKENS) + batch * completion_tokens(cfg)
    # DPO: chosen and rejected of each pair in one pass, padded alike, never packed; KTO: each answer beside a
    # mismatched one (its KL estimate) in the same pass
    if method.two_sequences:
        return 2 * batch * min(t.max_length, _p95(lengths) or t.max_length)
    if not lengths:
        return batch * t.max_length
    if packing:
        return min(batch * t.max_length, sum(min(n, t.max_length) for n in lengths))
    return batch * min(t.max_length, _p95(lengths))


def _p95(lengths: list[int] | None) -> int | None:
    if not lengths:
        return None
    ordered = sorted(lengths)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def training_bytes(s: dict, cfg, tokens: int, d: int, offloaded: bool) -> float:
    """The backward pass's peak above the static weights (see the module's 'training' term)."""
    h, inter, layers = s["hidden"], s["intermediate"], s["layers"]
    saved = tokens * (SAVED_PER_HIDDEN * h + SAVED_PER_INTERMEDIATE * inter) * d / 2
    largest = max(a * b for a, b in linear_sizes(s))
    grads = tokens * inter * 2 * d + (largest * d if cfg.model.load_in_4bit else 0)
    lm_head = min(tokens, LOGIT_TILE_TOKENS) * min(s["vocab"], LOGIT_TILE_VOCAB) * d + tokens * h * 4
    if not cfg.training.gradient_checkpointing:
        return saved * layers + max(grads, lm_head)
    kept = 0 if offloaded else tokens * h * d * layers
    return kept + max(saved + grads, lm_head)


def completion_tokens(cfg) -> int:
    """Tokens a sampled answer may take: the method's max_completion_length (GRPO's, distillation's); GRPO's for a
    method that samples none (a judge's rubric reads it)."""
    return get_key(cfg, method_of(cfg).completion_key or "grpo.max_completion_length")


def generation_bytes(s: dict, cfg, lengths, seqs: int, compiled: bool, merged: bool, d: int) -> float:
    """The sampling phase (GRPO, distillation): KV cache + prefill intermediates, or the merged copy's refresh (the
    larger)."""
    width = _p95(lengths) or GRPO_PROMPT_TOKENS
    if compiled:
        width = -(-width // PROMPT_MULTIPLE) * PROMPT_MULTIPLE
    kv = 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * d * seqs * (width + completion_tokens(cfg))
    prefill = seqs * width * s["intermediate"] * d * 3
    refresh = max(a * b for a, b in linear_sizes(s)) * (4 + 4 + d) if merged else 0
    return max(kv + prefill, refresh)


JUDGE_RUBRIC_TOKENS = 256  # the rubric's own words and the task around each judged completion


def judge_bytes(cfg, lengths, d: int) -> tuple[float, float]:
    """(weights, one judging pass) of a local judge model (reward.judge.model without a url; see
    app/rewards/judge/local.py): its 4-bit weights stay beside the trained model; a no-grad forward of
    judge.batch_size rows (prompt + completion + rubric) holds one layer's intermediates at a time and the logits of
    the last position only. (0, 0) without one, or when its size cannot be told."""
    j = cfg.reward.judge
    if not method_of(cfg).rewarded or not j.model or j.url:
        return 0.0, 0.0
    shape, params, _ = model_shape(j.model)
    if shape is None or not params:
        return 0.0, 0.0
    tokens = (_p95(lengths) or GRPO_PROMPT_TOKENS) + cfg.grpo.max_completion_length + JUDGE_RUBRIC_TOKENS
    rows = j.batch_size
    passing = rows * tokens * (4 * shape["hidden"] + 3 * shape["intermediate"]) * d + rows * shape["vocab"] * 4
    return weight_bytes(shape, params, True, True, d), passing


def _completions_at_once(cfg, decided: int | None) -> int:
    if decided:
        return decided
    t = cfg.training
    batch, accum = t.per_device_train_batch_size or 1, t.gradient_accumulation_steps or 1
    if not method_of(cfg).rewarded:  # TRL's DistillationTrainer samples every micro-batch of a step at once
        return batch * accum
    spg = t.extra_args.get("steps_per_generation") or steps_per_generation(
        batch, accum, cfg.grpo.generation_batch_size, cfg.grpo.num_generations)
    return t.extra_args.get("generation_batch_size") or batch * spg


def estimate_memory(cfg, lengths: list[int] | None = None, decisions: Decisions = Decisions()) -> dict:
    """Peak GPU memory of a *resolved* AppConfig (app.config.resolve.resolve) run with ``decisions``. ``lengths``: token
    lengths of the training rows (SFT: whole examples; GRPO: prompts) when the data is at hand. Returns GB figures
    (torch_peak_gb, total_gb and each term), a verdict per card and a one-line summary; the figures are None when
    the model's size cannot be told."""
    name = cfg.model.name_or_path or ""
    shape, params, source = (model_shape(name, decisions.model_files.config) if decisions.model_files else
                             model_shape(name))
    out: dict = {"model": cfg.model.name_or_path, "params": params, "params_source": source,
                 "verdicts": {}, "total_gb": None, "torch_peak_gb": None}
    if shape is None or not params:
        out["summary"] = ("model size unknown: use a local folder with config.json or a hub id with the size in it "
                          "(e.g. ...-1.5B-...)")
        out["verdicts"] = {g: "unknown" for g in CARDS_GB}
        return out
    s, dec = shape, decisions
    d = 4 if dec.dtype == "fp32" else 2
    mc, loading = cfg.model, 0.0
    if dec.census is not None:  # a MoE model, counted on its own tree (the vision side among its dense parameters)
        params = dec.census.total
        weights = census_bytes(dec.census, mc.load_in_4bit, mc.double_quant, mc.experts_in_4bit, d)
        if mc.experts_in_4bit:  # quantized as they load: the 4-bit model and one MoE layer's experts in flight
            loading = weights + dec.census.experts / max(dec.census.expert_layers, 1) * d
    else:
        weights = weight_bytes(s, params, mc.load_in_4bit, mc.double_quant, d) + dec.vision_params * d
        params += dec.vision_params
    adapter, paged = adapter_bytes(s, cfg, dec.cuda, d)
    packing = cfg.training.packing is not False if dec.packing is None else dec.packing
    tokens = micro_batch_tokens(cfg, lengths, packing)
    train = training_bytes(s, cfg, tokens, d, dec.offloading)
    copy = gen = 0.0
    compiled = False
    method = method_of(cfg)
    if method.rewarded:  # GRPO's samplers: the merged copy, vLLM's copy or the 4-bit model itself
        sampler = dec.sampler or ("vllm" if cfg.grpo.use_vllm else "plain" if cfg.grpo.sampler == "plain" else "merged")
        compiled = sampler == "merged" and dec.cuda if dec.compiled is None else dec.compiled
        if sampler != "plain":
            copy = d * (params if sampler == "vllm" else max(params - embed_params(s), 0))
        gen = generation_bytes(s, cfg, lengths, _completions_at_once(cfg, dec.completions_at_once), compiled,
                               sampler == "merged", d)
    elif method.samples:  # TRL samples a whole generation batch with the training model
        gen = generation_bytes(s, cfg, lengths, _completions_at_once(cfg, None), False, False, d)
    teacher, teaching = teacher_bytes(dec.teacher, tokens, d)
    train += teaching  # the teacher's forward runs beside the student's saved activations
    judge, judging = judge_bytes(cfg, lengths, d)
    # Rewards are scored right after sampling: a compiled sampler's static KV cache is still allocated then, so a
    # judging pass adds to it; other samplers' caches are freed and their blocks reused (the larger of the two).
    sampling = gen + judging if compiled else max(gen, judging)
    torch_peak = (max(weights + adapter + copy + judge + teacher + max(train, sampling), loading) / GB
                  + ALLOCATOR_RESERVE_GB)
    total = torch_peak + paged / GB + CUDA_CONTEXT_GB
    verdicts = {g: verdict(total, g) for g in CARDS_GB}
    out.update(
        params=params, weights_gb=weights / GB, lora_params=lora_param_count(s, cfg.lora.r or 16,
                                                                              cfg.lora.target_modules),
        lora_gb=(adapter + paged) / GB, activations_gb=train / GB, generation_gb=gen / GB, sampler_copy_gb=copy / GB,
        judge_gb=(judge + judging) / GB, teacher_gb=teacher / GB,
        reserve_gb=ALLOCATOR_RESERVE_GB, overhead_gb=CUDA_CONTEXT_GB, paged_gb=paged / GB, torch_peak_gb=torch_peak,
        total_gb=total,
        verdicts=verdicts, tokens_per_batch=tokens)
    smallest = next((g for g in CARDS_GB if verdicts[g] == "fits"), None)
    size = (f"{params / 1e9:.2f}B" if params >= 1e8 else f"{params / 1e6:.1f}M") + " params"
    if dec.census is not None:
        share = dec.census.experts / max(params, 1)
        size += (f", {share:.0%} of them experts in {'4' if mc.experts_in_4bit else '16'}-bit,"
                 if mc.load_in_4bit else "")
        out.update(expert_params=dec.census.experts, experts_4bit=mc.experts_in_4bit)
    source += f"; the teacher's weights {teacher / GB:.2f} GB of it" if teacher else ""
    out["summary"] = (f"~{total:.1f} GB on the card, {torch_peak:.1f} GB of it torch's peak ({size} from "
                      f"{source}); " + (f"the smallest card it fits with room to spare: {smallest} GB" if smallest else
                                         f"it does not fit {an(CARDS_GB[-1])} GB card with room to spare; lower the "
                                         "batch size or lengths, or pick a smaller model"))
    return out


def rounded(gb: float | None) -> float | None:  # a figure as status.json keeps it: two decimals (None stays None)
    return None if gb is None else round(gb, 2)


def verdict(total_gb: float | None, gb: float) -> str:
    """The estimate's verdict for a card of ``gb`` GB (a word of VERDICTS)."""
    if total_gb is None:
        return "unknown"
    return "fits" if total_gb <= FIT_MARGIN * gb else "tight" if total_gb <= gb else "too big"


def card_answer(est: dict, gb: float, word: str | None = None) -> str:
    """The verdict for the card asked about, in VERDICTS' words: what the plan's text says first."""
    word = word or verdict(est.get("total_gb"), gb)
    return f"{word} ({VERDICTS[word]})"


def fit_changes(est: dict, cfg) -> dict:
    """The settings that lower this run's memory, {dotted key: value}, most effective first."""
    t, out = cfg.training, {}
    if (t.per_device_train_batch_size or 1) > 1:
        out["training.per_device_train_batch_size"] = max(1, (t.per_device_train_batch_size or 1) // 2)
        out["training.gradient_accumulation_steps"] = (t.gradient_accumulation_steps or 1) * 2
    if not t.gradient_checkpointing:
        out["training.gradient_checkpointing"] = True
    method = method_of(cfg)
    if method.samples:  # the sampled answers are the sequences of every pass
        key = method.completion_key
        out[key] = max(16, get_key(cfg, key) // 2)
    if method.rewarded:
        if cfg.grpo.num_generations > 2:
            out["grpo.num_generations"] = max(2, cfg.grpo.num_generations // 2)
        if est.get("generation_gb", 0) > est.get("activations_gb", 0):
            out["grpo.generation_batch_size"] = out.get("training.per_device_train_batch_size",
                                                        t.per_device_train_batch_size or 1)
        if est.get("sampler_copy_gb"):
            out["grpo.sampler"] = "plain"
    if not method.samples:
        out["training.max_length"] = max(128, t.max_length // 2)
        if not t.activation_offloading:
            out["training.activation_offloading"] = True
    return out


def fit_problem(est: dict, cfg, gpu_gb: float | None, floor_gb: float | None = None) -> str | None:
    """None when the estimate fits ``gpu_gb`` (or either is unknown), else the one-line refusal: the numbers, what
    can help (fit_changes) and what cannot: weights that alone fill the card, or ``floor_gb`` (the estimate with
    every change of fit_changes) still above it."""
    total = est.get("total_gb")
    if total is None or not gpu_gb or total <= gpu_gb:
        return None
    beside = ((est.get("judge_gb"), f"the local judge model ({cfg.reward.judge.model})",
               "use a smaller judge, serve it elsewhere (reward.judge.url), or a larger GPU"),
              (est.get("teacher_gb"), f"the teacher ({cfg.distill.teacher})",
               "use a smaller teacher" + ("" if cfg.distill.teacher_4bit else ", load it in 4-bit "
                                          "(distill.teacher_4bit=true)") + ", or a larger GPU"))
    for gb, who, fix in beside:  # a second model that cannot sit beside the trained one: no setting helps
        if gb and est["weights_gb"] + gb + CUDA_CONTEXT_GB + ALLOCATOR_RESERVE_GB > gpu_gb:
            return (f"the memory estimate is {total:.1f} GB and this GPU has {gpu_gb:g} GB: {who} takes {gb:.1f} GB "
                    f"of it beside the trained model's {est['weights_gb']:.1f} GB of weights; {fix}")
    fixed = est["weights_gb"] + CUDA_CONTEXT_GB + ALLOCATOR_RESERVE_GB
    if fixed > gpu_gb:
        most = est["params"] * (gpu_gb / 2) / max(est["weights_gb"], 1e-9) / 1e9  # half the card for the weights
        return (f"the model's weights alone take {est['weights_gb']:.1f} GB ({est['params'] / 1e9:.1f}B params; "
                f"{fixed:.1f} GB with the CUDA context) and this GPU has {gpu_gb:g} GB: no setting makes it fit; "
                f"use a smaller model (about {most:.1f}B params or fewer leaves room to train) or a larger GPU")
    changes = fit_changes(est, cfg)
    said = ", ".join(f"--set {k}={_word(v)}" for k, v in changes.items())
    if floor_gb is not None and floor_gb > gpu_gb:
        teacher = est.get("teacher_gb")
        whose = (f"the teacher ({cfg.distill.teacher}) takes {teacher:.1f} GB of it"
                 + ("" if cfg.distill.teacher_4bit else ", 16-bit (distill.teacher_4bit=true takes about a quarter)")
                 + ": use a smaller teacher, a smaller student" if teacher else "use a smaller model")
        return (f"the memory estimate is {total:.1f} GB and this GPU has {gpu_gb:g} GB; even with {said} it is "
                f"{floor_gb:.1f} GB: {whose} or a larger GPU; --no-fit-check tries anyway")
    return (f"the memory estimate is {total:.1f} GB and this GPU has {gpu_gb:g} GB; try {said}, or a smaller "
            "model; --no-fit-check tries anyway")


def _word(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def format_estimate(est: dict, verdicts: dict | None = None) -> str:
    """Markdown for the UI: the total, the verdict per card (``verdicts``: the plan's per card, when given) and the
    breakdown."""
    if est.get("total_gb") is None:
        return f"**Memory estimate:** {est['summary']}"
    # Coloured words, not emoji: headless / minimal systems often have no emoji font.
    color = {"fits": "#137333", "tight": "#b06000", "too big": "#b3261e", "fits with changes": "#b06000"}
    cards = " · ".join(f"{g} GB: <span style='color:{color.get(v, '#444')}'>**{v}**</span>"
                       for g, v in (verdicts or est["verdicts"]).items())
    return (f"**Memory estimate:** {est['summary']}  \n{cards}  \n"
            f"<small>weights {est['weights_gb']:.2f} GB · LoRA+Adam {est['lora_gb']:.2f} GB "
            f"({est['lora_params'] / 1e6:.1f}M params) · training {est['activations_gb']:.2f} GB"
            + (f" · generation {est['generation_gb']:.2f} GB" if est["generation_gb"] else "")
            + (f" · 16-bit sampling copy {est['sampler_copy_gb']:.2f} GB" if est.get("sampler_copy_gb") else "")
            + (f" · judge model {est['judge_gb']:.2f} GB" if est.get("judge_gb") else "")
            + (f" · teacher {est['teacher_gb']:.2f} GB" if est.get("teacher_gb") else "")
            + f" · allocator {est['reserve_gb']:.2f} GB · CUDA context {est['overhead_gb']:.1f} GB</small>")
