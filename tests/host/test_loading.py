"""app/host/loading.py: the one library patch, entered and left around one load: transformers' loader hands each
parameter it places to the callback, and is itself again afterwards (an error inside included)."""

import pytest


def test_each_placed_parameter_reaches_the_callback_and_the_loader_is_restored(tiny_model):
    from transformers import AutoModelForCausalLM
    from transformers import core_model_loading as loader

    from app.host.loading import after_each_param

    original = loader.set_param_for_module
    seen = []
    with after_each_param(lambda module, name, p: seen.append((type(module).__name__, name, tuple(p.shape)))):
        assert loader.set_param_for_module is not original
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert loader.set_param_for_module is original
    loaded = {n for n, _ in model.named_parameters()}
    embedding = ("Embedding", "weight", tuple(model.get_input_embeddings().weight.shape))
    assert len(seen) == len(loaded) and embedding in seen
    with pytest.raises(RuntimeError), after_each_param(lambda *a: None):
        raise RuntimeError("a load that fails")
    assert loader.set_param_for_module is original
    AutoModelForCausalLM.from_pretrained(tiny_model)  # outside: nothing is called
    assert len(seen) == len(loaded)
