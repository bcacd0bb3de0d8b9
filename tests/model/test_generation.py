"""The one padding (app/model/generation.pad_left, as TRL's pad pads) and the one cut of a prompt to the context
(fit_prompt), used by generation, the tool loop, the local judge and the preference log-probabilities; the caller's
tokenizer is never touched."""

from types import SimpleNamespace

import pytest

from app.model.generation import fit_prompt, pad_id, pad_left


class Tok(SimpleNamespace):
    pass


def test_pad_left_pads_on_the_left_with_the_mask_and_positions():
    tok = Tok(pad_token_id=0, eos_token_id=2)
    out = pad_left(tok, [[5, 6, 7], [8]], positions=True)
    assert out["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]  # a padded row starts at position 0 too
    assert "position_ids" not in pad_left(tok, [[1]])


def test_the_pad_id_falls_back_to_eos_then_zero():
    assert pad_id(Tok(pad_token_id=None, eos_token_id=9)) == 9
    assert pad_id(Tok(pad_token_id=None, eos_token_id=None)) == 0


def test_fit_prompt_keeps_the_end_and_the_leading_bos():
    tok = Tok(bos_token_id=1)
    assert fit_prompt(tok, [1, 2, 3, 4, 5, 6], 4) == ([1, 4, 5, 6], True)
    assert fit_prompt(tok, [7, 2, 3, 4, 5, 6], 4) == ([3, 4, 5, 6], True)  # no BOS: the last tokens only
    assert fit_prompt(tok, [1, 2, 3], 4) == ([1, 2, 3], False)
    assert fit_prompt(tok, [1, 2, 3], None) == ([1, 2, 3], False)  # the context is unknown: nothing is cut


def test_generate_leaves_the_callers_tokenizer_as_it_was_and_matches_one_at_a_time(tiny_model):
    from app.config.schema import ModelConfig
    from app.model.generation import generate
    from app.model.load import load_base_model

    model, tok, _ = load_base_model(ModelConfig(name_or_path=str(tiny_model)), for_training=False)
    tok.padding_side = tok.truncation_side = "right"  # as training pads
    texts = ["a short one", "a much longer prompt than the first one, with more words in it"]
    batched = generate(model, tok, texts, max_new_tokens=6)
    assert (tok.padding_side, tok.truncation_side) == ("right", "right")
    alone = [generate(model, tok, [t], max_new_tokens=6)[0] for t in texts]
    assert [b["text"] for b in batched] == [a["text"] for a in alone]  # fp32 on a CPU: padding changes nothing


@pytest.mark.slow
def test_the_tool_loop_cuts_a_prompt_that_outgrows_the_context_and_says_so():
    """A conversation longer than the context leaves beside the answer keeps its end, as plain generation does, and
    the rollout is marked prompt_cut (compare counts it)."""
    from transformers import AutoTokenizer

    from app.config.builtin import TOOLS_MODEL, shipped_dir
    from app.tools.builtin import calculator
    from app.tools.loop import run_tool_loop

    tok = AutoTokenizer.from_pretrained(shipped_dir(TOOLS_MODEL))
    seen = []

    def generate_ids(prompts, n):
        seen.append((max(map(len, prompts)), n))
        return [[tok.eos_token_id] for _ in prompts]

    short = [[{"role": "user", "content": "2 + 2"}]]
    long = [[{"role": "user", "content": "what is 2 + 2? " * 200}]]
    for conv, context, cut in ((short, 4096, False), (long, 512, True)):
        seen.clear()
        model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=context))
        (rollout,) = run_tool_loop(model, tok, conv, [[calculator]], 1, 64, generate_ids)
        assert rollout.prompt_cut is cut and all(length + n <= context for length, n in seen)
