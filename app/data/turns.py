"""The text of cells and conversations: any cell as readable text, any dialect of turns as role/content messages,
a conversation as plain text for tokenizers without a chat template, and a system prompt put before the turns.
Shared by conversion (app/data/convert.py) and preference pairs (app/data/preference.py). Standard library only.
"""

from __future__ import annotations

import json

from app.data.profile import value_kind

# ShareGPT and other dialects -> the role names chat templates understand.
ROLE_MAP = {"human": "user", "user": "user", "prompter": "user", "question": "user",
            "gpt": "assistant", "assistant": "assistant", "bot": "assistant", "model": "assistant",
            "chatgpt": "assistant", "ai": "assistant", "answer": "assistant", "system": "system"}


def value_text(v) -> str:
    """Any cell as readable text: lists joined by lines, dicts by their text-like key."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, dict) for x in v) and value_kind(list(v)) == "messages":
            return render_conversation(normalize_messages(v))
        return "\n".join(t for t in (value_text(x) for x in v) if t)
    if isinstance(v, dict):
        for k in ("text", "value", "answer", "answers", "ground_truth", "normalized_value", "target", "solution",
                  "label", "contexts", "content"):
            if k in v and value_text(v[k]):
                return value_text(v[k])
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)


def normalize_messages(msgs) -> list[dict]:
    """Any list of turns -> [{"role": "user"|"assistant"|"system"|..., "content": str}]."""
    out = []
    for m in msgs or []:
        if not isinstance(m, dict):
            continue
        role = next((m[k] for k in ("role", "from", "speaker", "author", "sender") if m.get(k) is not None), "user")
        content = next((m[k] for k in ("content", "value", "text", "message", "utterance") if k in m), "")
        if isinstance(content, list):  # multimodal-style parts: keep the text ones
            content = "\n".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in content)
        role = str(role).strip().lower()
        out.append({"role": ROLE_MAP.get(role, role), "content": value_text(content)})
    return out


def render_conversation(msgs: list[dict]) -> str:
    """Plain-text form for tokenizers without a chat template; a single user turn is just its content."""
    if len(msgs) == 1 and msgs[0]["role"] == "user":
        return msgs[0]["content"]
    return "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in msgs)


def plain_text(text: str, system: str | None = None) -> str:
    """A prompt as a model without a chat template is trained on it and asked, the one rule (training's rows, pairs,
    chat, the API server): ``system`` (the run's system prompt), a blank line, then the prompt's ``text`` (a
    conversation's: render_conversation); ``reasked`` reads it back."""
    return f"{system}\n\n{text}" if system else text


def reasked(prompt, was: str | None, now: str | None):
    """A prompt written with system prompt ``was`` (by ``with_system``, or as ``system\n\nprompt`` text for a model
    without a chat template) rewritten with ``now`` instead: how a distillation's teacher is asked the student's
    prompts with its own system prompt. The data's own system turn stays."""
    if isinstance(prompt, str):
        bare = prompt[len(was) + 2:] if was and prompt.startswith(f"{was}\n\n") else prompt
        return f"{now}\n\n{bare}" if now else bare
    msgs = list(prompt)
    if was and msgs and msgs[0]["role"] == "system":
        content = msgs[0]["content"]
        if content == was:
            msgs = msgs[1:]
        elif isinstance(content, str) and content.startswith(f"{was}\n\n"):
            msgs = [{**msgs[0], "content": content[len(was) + 2:]}, *msgs[1:]]
    return with_system(msgs, now)


def with_system(msgs: list[dict], system_prompt: str | None) -> list[dict]:
    if not system_prompt:
        return msgs
    if msgs and msgs[0]["role"] == "system" and msgs[0]["content"] == system_prompt:  # already there (older
        return msgs  # pairs folders kept the system turn in each row)
    if msgs and msgs[0]["role"] == "system":  # keep the data's own system turn, after ours
        return [{"role": "system", "content": f"{system_prompt}\n\n{msgs[0]['content']}"}, *msgs[1:]]
    return [{"role": "system", "content": system_prompt}, *msgs]
