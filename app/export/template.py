"""A model's chat template as Ollama needs it: a Go TEMPLATE and the stop strings, derived from the template itself.

No family table: the Jinja template is rendered on probe conversations with marker contents, the text around each
role's content is read off (``TurnFormat``), and the result is kept only if it re-renders *other* conversations
(no system, several turns) exactly as transformers does. Templates that are not a plain sequence of turns (tools,
reasoning blocks rewritten per turn, ...) fail that check and get no TEMPLATE, said in one line; Ollama then falls
back to its own detection of the GGUF's embedded template.

Standard library only: the tokenizer is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("system", "user", "assistant")
_MARK = "\ue000{}\ue001"  # private-use characters: never in a real template, and not whitespace (trim keeps them)


@dataclass
class TurnFormat:
    """The text a template puts around each message: start + (prefix[role] + content + suffix[role])... + gen."""

    start: str
    prefix: dict[str, str]
    suffix: dict[str, str]
    generation: str  # what add_generation_prompt appends
    default_system: str | None = None  # what the template says when no system message is given
    problems: list[str] = field(default_factory=list)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        msgs = list(messages)
        if self.default_system is not None and not any(m["role"] == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.default_system})
        body = "".join(self.prefix[m["role"]] + m["content"] + self.suffix[m["role"]] for m in msgs)
        return self.start + body + (self.generation if add_generation_prompt else "")


def _render(tok, messages, add_generation_prompt=True) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def _candidates(tok):
    """Turn formats consistent with one conversation holding every role, most likely first. The text between two
    contents is one role's suffix then the next one's prefix; where one ends is not visible in a single rendering,
    so every split is a candidate and derive() keeps the first that re-renders the other conversations."""
    msgs = [{"role": r, "content": _MARK.format(r)} for r in ROLES]
    msgs.append({"role": "user", "content": _MARK.format("user2")})
    try:
        text = _render(tok, msgs, add_generation_prompt=False)
        with_gen = _render(tok, msgs, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that rejects a system turn (or any of these) is not linear
        return
    marks = [_MARK.format(r) for r in (*ROLES, "user2")]
    pos = [text.find(m) for m in marks]
    if any(p < 0 for p in pos) or pos != sorted(pos) or not with_gen.startswith(text):
        return
    ends = [p + len(m) for p, m in zip(pos, marks)]
    sys_user, user_asst, asst_user = (text[ends[i]:pos[i + 1]] for i in range(3))
    head, user_suffix = text[:pos[0]], text[ends[3]:]
    if not user_asst.startswith(user_suffix):
        return
    assistant_prefix = user_asst[len(user_suffix):]
    for split in range(len(asst_user) + 1):  # the longest user prefix first
        asst_suffix, user_prefix = asst_user[:split], asst_user[split:]
        if not sys_user.endswith(user_prefix):
            continue
        system_suffix = sys_user[:len(sys_user) - len(user_prefix)]
        for cut in range(len(head) + 1):  # the start (BOS, ...) is what a conversation without a system has too
            yield TurnFormat(start=head[:cut],
                             prefix={"system": head[cut:], "user": user_prefix, "assistant": assistant_prefix},
                             suffix={"system": system_suffix, "user": user_suffix, "assistant": asst_suffix},
                             generation=with_gen[len(text):])


CHECKS = (
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
     {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "u3"}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "the answer"}],
    # a template may rewrite earlier answers (drop their reasoning). Surrounding whitespace is not probed: Llama 3
    # trims contents, and chat clients send them trimmed.
    [{"role": "user", "content": "first"}, {"role": "assistant", "content": "<think>plan</think>\n\nsaid"},
     {"role": "user", "content": "next"}],
)


def derive(tok) -> TurnFormat | None:
    """The template's turn format, or None when it is not a plain sequence of turns (checked on CHECKS, with and
    without the generation prompt). A template that inserts its own system message when none is given (Qwen2.5's
    "You are Qwen...") is found out and that text recorded as ``default_system``."""
    if not getattr(tok, "chat_template", None):
        return None
    for fmt in _candidates(tok):
        if _agrees(tok, fmt):
            return fmt
        default = _default_system(tok, fmt)
        if default is not None:
            fmt.default_system = default
            if _agrees(tok, fmt):
                return fmt
            fmt.default_system = None
    return None


def _default_system(tok, fmt: TurnFormat) -> str | None:
    text = _render(tok, [{"role": "user", "content": "x"}])
    head = fmt.start + fmt.prefix["system"]
    tail = fmt.suffix["system"] + fmt.prefix["user"] + "x" + fmt.suffix["user"] + fmt.generation
    if text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail):
        return text[len(head):len(text) - len(tail)]
    return None


def _agrees(tok, fmt: TurnFormat) -> bool:
    try:
        return all(_render(tok, m, g) == fmt.render(m, g) for m in CHECKS for g in (True, False))
    except Exception:  # noqa: BLE001 - a template that raises on one of the checks is not one we can mirror
        return False


# ---------------------------------------------------------------------------------------------- Ollama


def _go(text: str) -> str:
    """Literal text inside a Go template: only '{{' would be read as an action."""
    return text.replace("{{", '{{ "{{" }}')


def go_template(fmt: TurnFormat, bos: str | None = None) -> str:
    """Ollama's TEMPLATE (Go text/template over .System and .Messages) that renders what ``fmt`` renders. No
    whitespace-trimming actions ("{{-"): the turns' own newlines are part of the format. A start that is only the BOS
    token is left out when the tokenizer adds BOS itself (``bos`` given), as llama.cpp and Ollama do."""
    start = "" if bos and fmt.start == bos else fmt.start
    return "".join([
        _go(start),
        "{{ if .System }}", _go(fmt.prefix["system"]), "{{ .System }}", _go(fmt.suffix["system"]), "{{ end }}",
        "{{ range .Messages }}",
        '{{ if eq .Role "user" }}', _go(fmt.prefix["user"]), "{{ .Content }}", _go(fmt.suffix["user"]),
        '{{ else if eq .Role "assistant" }}', _go(fmt.prefix["assistant"]), "{{ .Content }}",
        _go(fmt.suffix["assistant"]),
        "{{ end }}{{ end }}", _go(fmt.generation),
    ])


def stop_strings(tok, fmt: TurnFormat | None, eos_ids: list[int]) -> list[str]:
    """Every special token that ends the model's turn: its EOS token(s), the special tokens of the assistant's
    suffix, and those that open a user turn (a model that starts one has finished its answer)."""
    special = set(tok.all_special_tokens) | {t.content for t in tok.added_tokens_decoder.values() if t.special}
    stops: list[str] = []
    for i in eos_ids:
        t = tok.convert_ids_to_tokens(int(i))
        if t:
            stops.append(t)
    if tok.eos_token:
        stops.append(tok.eos_token)
    if fmt is not None:
        for text in (fmt.suffix["assistant"], fmt.prefix["user"]):
            stops += [s for s in sorted(special, key=len, reverse=True) if s and s in text]
    return list(dict.fromkeys(s for s in stops if s))
