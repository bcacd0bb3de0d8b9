"""Which tokens of an SFT conversation carry the loss. Prompt/reference data trains on its completion only (TRL's
prompt-completion format); conversations train on the assistant's answers only by default, as LLaMA-Factory does,
never on the system prompt or the user's words: every assistant turn where TRL can mask them (the chat template has
``{% generation %}`` markers, or TRL ships a training template for it), else each conversation's last answer (its
turns before that answer are the prompt). ``training.assistant_only_loss=false`` trains on every token.

Owns ``plan_answer_loss`` (called by app/train/planning/plan.make_plan; app/data/convert.to_sft shapes the rows it
decides) and ``masks_turns`` (what TRL's SFTConfig gets). Must not load weights.
"""

from __future__ import annotations

from app.config.methods import method_of
from app.model.templates import masks_assistant_turns


def plan_answer_loss(cfg, det, tok, vision, say) -> tuple[str, dict]:
    """(mode for to_sft: "turns" | "last" | "all", config changes) of an SFT run on ``det``'s data."""
    conversations = det is not None and det.prompt_field is None and bool(det.messages_field)
    if not method_of(cfg).trains_whole_examples or not conversations:
        return "all", {}  # prompt / reference rows: the completion alone trains already
    if cfg.training.assistant_only_loss is False:
        say("loss on every token of each conversation, the system prompt and the user's turns included "
            "(training.assistant_only_loss=false)")
        return "all", {}
    changes = {} if cfg.training.assistant_only_loss else {"training.assistant_only_loss": True}
    if tok is not None and vision is None and masks_assistant_turns(tok):
        say("loss on the assistant's turns only (training.assistant_only_loss): TRL masks every other token with "
            "its training chat template; the system prompt and the user's words carry no loss")
        return "turns", changes
    why = ("the model has no chat template" if tok is not None and not getattr(tok, "chat_template", None)
           else "a run on images" if vision is not None
           else "its chat template marks no assistant turns ({% generation %}) and TRL ships no training template "
                "for it")
    say(f"loss on each conversation's last answer only (training.assistant_only_loss): {why}, so a conversation "
        "trains as its prompt (every turn before its last answer, context only) and that answer")
    return "last", changes


def masks_turns(plan) -> bool:
    """Whether TRL masks the assistant turns itself (SFTConfig's assistant_only_loss): conversations kept whole."""
    ds = plan.train_ds
    return bool(plan.cfg.training.assistant_only_loss) and ds is not None and "messages" in ds.column_names
