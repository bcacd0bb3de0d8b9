"""Loading a base model in 4-bit (bitsandbytes NF4) as placed, and what is measured on a loaded one: eval mode that
keeps 4-bit layers intact, whether packed examples stay apart, the adapter's dtype. The real transformers +
bitsandbytes path, which runs on CPU too (slowly), so tests exercise it on tiny models."""

from __future__ import annotations

import contextlib
import copy
import os

from app.config.schema import ModelConfig
from app.errors import UserError
from app.host.loading import after_each_param
from app.host.machine import torch_dtype
from app.model.experts import QuantizeAsLoaded, expert_parameters, quantize_experts
from app.model.placement import Placement, placement, quant_storage
from app.model.published import as_sixteen_bit, dequantizing_config, published_format, read_into_4bit
from app.model.shape import meta_model, read_config
from app.model.source import check_model_source, looks_local, model_load_error
from app.model.templates import apply_named_template
from app.model.vision import kept_16bit, load_processor, skip_modules


@contextlib.contextmanager
def eval_keeping_4bit(model):
    """A training model in eval mode for a moment (no dropout, generate() uses its cache), its 4-bit layers left in
    training mode: with them, bitsandbytes never repacks their weights for its CPU kernel (one_cpu_path says why),
    even on a model loaded some other way. Restored on exit."""
    from bitsandbytes.nn import Linear4bit

    training = model.training
    model.eval()
    for m in model.modules():
        if isinstance(m, Linear4bit):
            m.train()
    try:
        yield model
    finally:
        model.train(training)


def quantization_config(mc: ModelConfig, dtype: str, fsdp: bool = False, skip: list[str] | None = None):
    """bitsandbytes' NF4 config; ``skip``: module paths left in 16-bit (a vision-language model's vision side)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        **({"llm_int8_skip_modules": skip} if skip else {}),
        load_in_4bit=True,
        bnb_4bit_quant_type=mc.quant_type,
        bnb_4bit_use_double_quant=mc.double_quant,  # ~0.37 bit/param saved (QLoRA paper)
        bnb_4bit_compute_dtype=torch_dtype(dtype),
        **({"bnb_4bit_quant_storage": quant_storage(dtype)} if fsdp else {}),
    )


def load_tokenizer(mc: ModelConfig, local_only: bool = False, config=None):
    """The run's tokenizer: a pad token (batched generation and training need one), its named chat template.
    ``config``: the model's transformers config when the caller has it (AutoTokenizer then reads no config.json)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        mc.name_or_path, revision=mc.revision, trust_remote_code=mc.trust_remote_code, local_files_only=local_only,
        **({"config": config} if config is not None else {}),
    )
    if tok.pad_token is None:  # batched generation and training both need padding
        tok.pad_token = tok.eos_token
    return apply_named_template(tok, mc.chat_template)


def load_base_model(mc: ModelConfig, local_only: bool = False, for_training: bool = True, device: str = "auto",
                    fsdp: bool = False, where: Placement | None = None, tok=None, images: bool = False,
                    vision_paths: tuple | None = None, processor=None, files=None):
    """Returns (model, tokenizer, info). The model is 4-bit unless model.load_in_4bit is false; ``device`` is
    runtime.device (auto / cpu / cuda), used when ``where`` (the decided placement) is not given; ``tok``: the
    tokenizer when the caller has loaded it already. ``images``: load the vision-language model whole (its
    image-text-to-text class, the vision side in 16-bit) with its processor, in info["processor"];
    ``vision_paths`` / ``processor``: the vision side's modules and the processor as a plan decided and loaded them
    (read, never worked out again: no second meta-device shell, no second processor load); ``files``: the model's
    app.model.files.ModelFiles as a plan read them (its transformers config and processor: config.json not parsed
    again)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    check_model_source(mc.name_or_path, local_only)
    where = where or placement(mc, device)
    dtype, attention = where.compute_dtype, where.attention
    kwargs = dict(
        attn_implementation=attention,
        revision=mc.revision,
        trust_remote_code=mc.trust_remote_code,
        local_files_only=local_only,
        dtype=torch_dtype(dtype),
    )
    raw = files.config if files is not None else read_config(mc.name_or_path)
    published = dequantizing_config(raw)  # MXFP4 / FP8: transformers' own config for reading it 16-bit
    config = _given_config(mc, files, published, local_only)
    if config is not None:  # a copy: loading writes its choices (quantization, attention) into the config it gets
        kwargs["config"] = copy.deepcopy(config)
    skip = None
    if images and vision_paths:  # the plan's
        skip = kept_16bit(vision_paths)
    elif images:  # no plan: the vision side's module paths, read from the model's tree on the meta device
        shell = (files.shell(images=True) if files is not None else
                 meta_model(mc.name_or_path, mc.revision, mc.trust_remote_code, local_only))
        skip = skip_modules(shell)
    if mc.load_in_4bit:
        kwargs["quantization_config"] = quantization_config(mc, dtype, fsdp, skip)
    elif published is not None:  # MXFP4 / FP8 weights, dequantized as they load (16-bit run)
        kwargs["quantization_config"] = published
    # Always explicit: with no device_map, transformers' 4-bit loader puts the model on the GPU whenever one is
    # visible, which would ignore runtime.device=cpu. Under torchrun each rank takes its own GPU (LOCAL_RANK);
    # under FSDP the Trainer places (and shards) the model itself.
    if not fsdp:
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))} if where.cuda else {"": "cpu"}
    auto = AutoModelForImageTextToText if images else AutoModelForCausalLM
    # each fused expert weight quantized as the loader places it: the 16-bit experts are never all in memory
    as_loaded = QuantizeAsLoaded(mc.quant_type, mc.double_quant) if mc.experts_in_4bit else None
    with (read_into_4bit(published, kwargs["config"]) if mc.load_in_4bit and published is not None else
          contextlib.nullcontext()), (after_each_param(as_loaded) if as_loaded else contextlib.nullcontext()):
        model = _from_pretrained(auto, mc, kwargs)
    if published is not None and not mc.load_in_4bit:
        as_sixteen_bit(model, kwargs["dtype"])
    # What the model really runs (auto may have fallen back to eager), which decides packing.
    attention = getattr(model.config, "_attn_implementation", None) or attention
    tok = tok if tok is not None else load_tokenizer(mc, local_only, config)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    if not for_training:
        model.eval()
    one_cpu_path(model)
    torch.manual_seed(0)
    info = {"compute_dtype": dtype, "cuda": where.cuda, "gpu": where.gpu,
            "4bit": mc.load_in_4bit and _has_4bit_layers(model), "attention": attention,
            **({"published_as": published_format(raw)} if published is not None else {})}
    # fused MoE experts: bitsandbytes' loader leaves them as they are, unless they were quantized as they loaded
    experts = as_loaded.expert_params() if as_loaded and as_loaded.elements else sum(expert_parameters(model).values())
    if experts:
        late = quantize_experts(model, mc.quant_type, mc.double_quant) if mc.experts_in_4bit else 0
        info["experts"] = {"params": experts, "4bit": mc.experts_in_4bit,
                           "quantized_as_loaded": as_loaded.elements if as_loaded else 0, "quantized_after": late}
    if images:
        processor = processor or (files.processor(local_only) if files is not None else
                                   load_processor(mc.name_or_path, mc.revision, mc.trust_remote_code, local_only))
        info["processor"] = processor
        processor.tokenizer = tok  # one tokenizer: the run's (its pad token, its named chat template)
        info["kept_16bit"] = skip
    return model, tok, info


def _given_config(mc: ModelConfig, files, published, local_only: bool):
    """The transformers config a load is given: the plan's (config.json not parsed again), or a published
    checkpoint's read here (a 4-bit load takes its quantization_config off); None: transformers reads it itself."""
    if files is not None and files.config is not None:
        return files.hf_config(local_only)
    if published is None:
        return None
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(mc.name_or_path, revision=mc.revision, trust_remote_code=mc.trust_remote_code,
                                      local_files_only=local_only)


def one_cpu_path(model) -> int:
    """Every 4-bit layer on bitsandbytes' generic path, never its AVX512-BF16 CPU kernel; returns how many layers.
    On a CPU with AVX512-BF16, a Linear4bit's forward in eval mode without grad repacks its weights for that kernel,
    which computes in bf16: the proof, compare and chat (eval mode) then read a model other than the one training
    ran and the held-out points during training read (training mode, fp32 dequantize). The same adapter on the same
    rows scored 19.4% during training and 29.0% in its proof (#59); a random adapter on the demo's base answers 1 of
    64 prompts differently greedy. The kernel also fails on a layer it cannot repack (Qwen2-MoE's one-output
    shared_expert_gate: "N must be divisible by block_n") and rewrites the weights in place, which breaks training
    them later (OPT's biases). The cost, measured on the demo's tiny base on a quiet 2-core machine: greedy answers
    to 64 prompts take 10-20% longer on the generic path (0.25-0.31 s vs 0.22-0.26 s), the price of one figure.
    Nothing changes on a GPU, where the attribute is never read."""
    from bitsandbytes.nn import Linear4bit

    layers = [m for m in model.modules() if isinstance(m, Linear4bit)]
    for m in layers:
        m.support_avx512bf16_for_cpu = False  # read by Linear4bit.forward before it repacks
    return len(layers)


def _has_4bit_layers(model) -> bool:
    """Whether transformers really quantized anything: for some architectures it quantizes nothing and only says
    so in a misleading line (Falcon's FalconLinear in transformers 5.23: "loading your model using eetq")."""
    from bitsandbytes.nn import Linear4bit

    return any(isinstance(m, Linear4bit) for m in model.modules())


# How transformers' loader starts its errors for weight files that do not fit the model (utils/loading_report.py).
_UNREADABLE_WEIGHTS = ("Error(s) in loading state_dict", "We encountered some issues during automatic conversion")


def _from_pretrained(auto_cls, mc: ModelConfig, kwargs: dict):
    """Loads with the attention kernel asked for. On auto, an architecture without sdpa (Gemma 2) or flash
    attention support falls back to what it has: transformers picks sdpa, else eager, when asked for none. An
    explicit kernel the architecture lacks is the user's to change."""
    try:
        try:
            return auto_cls.from_pretrained(mc.name_or_path, **kwargs)
        except ValueError as e:
            if "attention" not in str(e) or kwargs.get("attn_implementation") is None:
                raise
            if mc.attn_implementation != "auto":
                raise UserError(f"model '{mc.name_or_path}' does not support model.attn_implementation="
                                f"{mc.attn_implementation}; set it to auto or eager") from None
        return auto_cls.from_pretrained(mc.name_or_path, **{**kwargs, "attn_implementation": None})
    except OSError as e:
        raise model_load_error(mc.name_or_path, e) from None
    except RuntimeError as e:  # weight files that do not make the model its config describes (torn, another model)
        if not str(e).startswith(_UNREADABLE_WEIGHTS):
            raise
        again = "copy its files again" if looks_local(mc.name_or_path) else \
            f"download it again (qlora-app prefetch --model {mc.name_or_path})"
        raise UserError(f"could not load model '{mc.name_or_path}': its weight files do not make the model its "
                        "config.json describes (a tensor missing, of another shape, or a published format's piece "
                        f"torn); {again}, or pass another model") from None


def match_adapter_dtype(model, compute_dtype: str) -> int:
    """TRL casts LoRA weights of a quantized model to bf16 (the QLoRA paper's choice on Ampere GPUs). With fp32
    compute (CPU) that only throws precision away: Adam updates smaller than bf16's ~3 significant digits vanish
    and training drifts instead of learning. Put trainable weights back in the compute dtype; returns how many."""
    import torch

    if compute_dtype != "fp32":
        return 0
    n = 0
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.to(torch.float32)
            n += 1
    return n


def packed_examples_stay_apart(model) -> bool:
    """Measured, not assumed: two short random sequences packed into one row (positions restarting, no mask, no
    cache: how TRL's padding-free collator feeds training) against the second one alone, and against the two simply
    concatenated (the second reading the first). Llama, Qwen, Mistral, Gemma, Phi and GPT-2 keep them apart in
    transformers 5; OPT (positions from the attention mask) and Falcon do not, and packing would let each example
    read the one before it. Judged against the concatenated run's difference, not a fixed tolerance: in bf16 on a
    GPU kernels of different shapes differ by a few percent of the logits (a fixed 2 % turned packing off there),
    while an example that reads another differs by about as much as the concatenated one."""
    import torch

    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    first, second = torch.randint(0, vocab, (1, 7), generator=g), torch.randint(0, vocab, (1, 5), generator=g)
    device = next(model.parameters()).device
    ids = torch.cat([first, second], dim=1).to(device)
    positions = torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0).to(device)
    with eval_keeping_4bit(model), torch.no_grad():  # no dropout: the passes must differ only by packing
        packed = model(input_ids=ids, position_ids=positions, use_cache=False).logits[:, 7:].float()
        alone = model(input_ids=second.to(device), use_cache=False).logits.float()
        joined = model(input_ids=ids, use_cache=False).logits[:, 7:].float()
    read = (joined - alone).abs().max()  # what reading the first example does to the second's logits
    return bool((packed - alone).abs().max() <= 0.1 * read + 1e-3 * alone.abs().max())
