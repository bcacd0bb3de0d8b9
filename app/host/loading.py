"""The patches of a library qlora-app makes, each around one model load only. transformers' loader, for the length
of one load, hands each parameter it has just placed to a callback (a mixture-of-experts model's fused experts are
quantized to 4-bit there, as each is read: app/model/experts.quantize_as_loaded).

Why a patch: transformers 5.23's bitsandbytes quantizer converts ``nn.Linear`` weights only, so a MoE model's fused
3-D experts (most of its bytes) would load whole in 16-bit and be quantized afterwards: the load's peak holds every
expert in 16-bit (56 GB for Qwen3-30B-A3B), the model no 24 GB card can hold. The loader places each parameter
through ``core_model_loading.set_param_for_module`` (looked up by name on every call), so wrapping that function
for one load quantizes each expert tensor as it lands: the peak is the 4-bit model plus the one tensor in flight.
Axolotl's MoE loading does the same. Entered and left around the load only (restored on exit, an error included);
loads in other threads during it would be quantized too, and qlora-app loads one model at a time.

A checkpoint published quantized (gpt-oss's MXFP4 experts, a block-FP8 release) loads into a 4-bit run only if its
tensors are dequantized as the loader gathers them, before bitsandbytes quantizes them: transformers has those
operations (its MXFP4 / FP8 quantizers' dequantize mode adds them to the model's weight conversions), but takes one
quantization per load, and the run's is bitsandbytes'. ``weight_conversions`` hands the conversions transformers made
for one load to a function that adds the published format's (app/model/published.py).

llama-cpp-python builds llama.cpp's model parameters inside ``Llama()`` with no way to pass ``use_extra_bufts``;
``llama_plain_buffers`` sets it false on the defaults for one open, on a CPU whose repacked kernels fault
(app/export/llamacpp.py's probe).

Owns the patches. Must not decide what is quantized (the callback does) nor import transformers or llama_cpp at
module level.
"""

from __future__ import annotations

import contextlib
from typing import Callable


@contextlib.contextmanager
def after_each_param(callback: Callable[[object, str, object], None]):
    """Within: transformers' loader calls ``callback(module, name, parameter)`` after it sets each parameter."""
    from transformers import core_model_loading as loader

    original = loader.set_param_for_module

    def set_then_call(model, target_name, param_value, loading_info, hf_quantizer):
        original(model, target_name, param_value, loading_info, hf_quantizer)
        path, _, name = target_name.rpartition(".")
        module = model.get_submodule(path) if path else model
        placed = module._parameters.get(name)
        if placed is not None:
            callback(module, name, placed)

    loader.set_param_for_module = set_then_call
    try:
        yield
    finally:
        loader.set_param_for_module = original


@contextlib.contextmanager
def weight_conversions(extend: Callable[[list, object], list]):
    """Within: the weight conversions transformers' loader applies to a checkpoint's tensors (renames, merges of
    per-expert tensors, the quantizer's) are ``extend(conversions, model)``, for each load."""
    from transformers import modeling_utils

    original = modeling_utils.get_model_conversion_mapping

    def extended(model, *args, **kwargs):
        return extend(original(model, *args, **kwargs), model)

    modeling_utils.get_model_conversion_mapping = extended
    try:
        yield
    finally:
        modeling_utils.get_model_conversion_mapping = original


@contextlib.contextmanager
def llama_plain_buffers(enabled: bool = True):
    """Within (when ``enabled``): llama.cpp models open with ``use_extra_bufts=False``, llama.cpp's plain CPU buffers
    instead of the repacked ones (AMX and friends)."""
    if not enabled:
        yield
        return
    from llama_cpp import llama as llama_module

    original = llama_module.llama_cpp.llama_model_default_params

    def plain_params():
        params = original()
        params.use_extra_bufts = False
        return params

    llama_module.llama_cpp.llama_model_default_params = plain_params
    try:
        yield
    finally:
        llama_module.llama_cpp.llama_model_default_params = original
