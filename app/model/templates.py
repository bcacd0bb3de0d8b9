"""Chat templates and tool calls: which template a model runs with, and whether TRL can read its tool calls.

A tool run needs a template that renders tools and calls (TRL's ``supports_tool_calling``) and a response parser
for it: TRL knows the parsers of the templates it ships (Qwen2.5, Qwen3, Qwen3.5, Llama 3.1/3.2, GLM-4-MoE, gpt-oss,
Gemma 4, LFM2, ...: ``trl.chat_template_utils.add_response_schema``). ``model.chat_template`` (``--chat-template
NAME``) puts one of the templates TRL ships in place of the model's own; the model must have learned that format.

Owns: choosing and checking the template. Must not load weights. trl / transformers are imported inside functions.
"""

from __future__ import annotations

from pathlib import Path

from app.errors import UserError

# The families users meet most, named first in messages (every template TRL can parse is accepted).
COMMON_TOOL_TEMPLATES = ("qwen2_5", "qwen3", "qwen3_5_nothink", "llama3_1", "llama3_2", "gemma4", "gptoss", "glm4moe",
                         "lfm2_v2")


def _templates_dir() -> Path:
    import trl  # heavy: only when a template is named or checked

    return Path(trl.__file__).parent / "chat_templates"


def shipped_templates() -> list[str]:
    """The names of the chat templates TRL ships (its training variants left out: TRL picks those itself)."""
    return sorted(p.stem for p in _templates_dir().glob("*.jinja") if not p.stem.endswith("_training"))


def tool_templates() -> list[str]:
    """The shipped templates whose tool calls TRL can parse."""
    from trl.chat_template_utils import add_response_schema

    class _Probe:
        response_template = response_schema = None

        def __init__(self, template: str):
            self.chat_template = template

    names = []
    for name in shipped_templates():
        try:
            add_response_schema(_Probe((_templates_dir() / f"{name}.jinja").read_text(encoding="utf-8")))
        except ValueError:
            continue
        names.append(name)
    return names


def _text(template) -> str:
    """A chat template's text: tokenizers may hold several by name, the default one is the chat's."""
    return template if isinstance(template, str) else (template or {}).get("default", "")


def shipped_template_name(template) -> str | None:
    """The name of the template TRL ships that ``template`` (a chat template's text) is, else None."""
    text = _text(template)
    for name in shipped_templates():
        if (_templates_dir() / f"{name}.jinja").read_text(encoding="utf-8").strip() == text.strip():
            return name
    return None


def template_file(name: str) -> Path:
    """The file of the shipped template ``name`` (a UserError naming the others when there is none)."""
    path = _templates_dir() / f"{name}.jinja"
    if name.endswith("_training") or not path.is_file():
        raise UserError(f"model.chat_template '{name}' is not a template TRL ships; pick one of: "
                        f"{', '.join(shipped_templates())}")
    return path


def apply_named_template(tok, name: str | None):
    """``tok`` with the shipped template ``name`` in place of its own (None: as it is)."""
    if not name:
        return tok
    tok.chat_template = template_file(name).read_text(encoding="utf-8")
    return tok


def tool_template_problem(tok, model_name: str) -> str | None:
    """Why a tool run cannot use ``tok``'s chat template (None: it can): it renders no tool calls, or TRL cannot
    parse the calls it renders."""
    from trl.chat_template_utils import supports_tool_calling

    known = tool_templates()
    shown = [n for n in COMMON_TOOL_TEMPLATES if n in known]
    more = f" and {len(known) - len(shown)} more in trl/chat_templates" if len(known) > len(shown) else ""
    fix = (f"TRL reads the tool calls of the templates {', '.join(shown)}{more}; pass --chat-template NAME (one the "
           "model was trained on) or use a model with one of them")
    if not getattr(tok, "chat_template", None):
        return f"model '{model_name}' has no chat template, and tools need one; {fix}"
    if not supports_tool_calling(tok):
        return f"the chat template of '{model_name}' cannot render tool calls and their results; {fix}"
    try:
        ensure_tool_parser(tok)
    except ValueError:
        return f"TRL cannot read the tool calls of '{model_name}''s chat template; {fix}"
    return None


def ensure_tool_parser(tok):
    """``tok`` with TRL's response parser for its template (as GRPOTrainer sets it); ValueError for a template TRL
    does not know."""
    from trl.chat_template_utils import add_response_schema

    if getattr(tok, "response_template", None) is None and getattr(tok, "response_schema", None) is None:
        add_response_schema(tok)
    return tok


def masks_assistant_turns(tok) -> bool:
    """Whether TRL can mask every assistant turn of a conversation with ``tok``'s chat template (its
    ``assistant_only_loss``): the template marks them with ``{% generation %}``, or TRL ships a training template
    for it (Qwen2.5 / 3 / 3.5, Gemma 2 / 3, Llama 3.x, Phi-3, gpt-oss, GLM-4-MoE, ...) and swaps it in itself."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = getattr(tok, "chat_template", None)
    if not template:
        return False
    if has_generation_markers(_text(template)):
        return True
    try:
        get_training_chat_template(tok)
    except ValueError:  # a template TRL has no training variant of
        return False
    return True
