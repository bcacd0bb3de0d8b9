"""What an export measures of itself: each artifact it wrote (the merged folder in transformers; each GGUF file in
llama.cpp, in a child process of its own) asked the run's proof rows again, greedily and as the proof asked them
(app/eval/compare.collect_prompts: the same rows from the run's seed, the same prompt text and answer budget); its
accuracy by the run's reward beside the adapter's (the proof's), and how many of its answers are the adapter's text.
The export says it, writes it into the card and records it in the run's status.json (``exports``), so what ships is
stated as measured, never assumed equal to the adapter.

Owns: asking an exported artifact the proof's rows. Must not write files of the export (bundle.py) nor status.json
(app/run/record.py does).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from app.ask.asking import Asker
from app.eval.compare import collect_prompts, score_cell
from app.export.llamacpp import in_child, open_gguf
from app.model.generation import adds_special_tokens, format_prompt
from app.run import layout


@dataclass(frozen=True)
class Measured:
    artifact: str  # the file or folder name
    n: int
    accuracy: float
    adapter_accuracy: float  # the proof's, on the same rows
    same: int  # greedy answers that are the adapter's text

    def line(self) -> str:
        return (f"{self.artifact}: {self.accuracy:.1%} on the proof's {self.n} held-out rows (the adapter: "
                f"{self.adapter_accuracy:.1%}); {self.same} of {self.n} greedy answers are the adapter's")

    def record(self) -> dict:
        return asdict(self)


def card_section(found: list[Measured]) -> str:
    """The card's account of what the export itself answers on the proof's rows."""
    lines = ["## What this export answers", "",
             "Asked the run's held-out proof rows again (greedy, as the proof asked the adapter):", ""]
    return "\n".join(lines + [f"- {m.line()}" for m in found])


@dataclass
class ProofRows:
    items: list[dict]  # as collect_prompts makes them (messages, plain, reference, prompt)
    adapter: list[dict]  # the proof's adapter cell of each row (text, correct)
    run_cfg: object
    max_new_tokens: int


def proof_rows(run_dir: Path | None, run_cfg, local_only: bool, limit: int | None = None) -> tuple[ProofRows | None,
                                                                                                   str | None]:
    """(the run's proof rows drawn again, None) or (None, why not): a run without a proof, a tool or picture run (its
    answers need tools or pictures an artifact is not asked with here), rows that are not drawn again alike."""
    proof = (run_dir / layout.COMPARE_JSON) if run_dir is not None else None
    if run_cfg is None or proof is None or not proof.is_file():
        return None, "the run has no proof (compare.json) to measure the export against"
    if run_cfg.tools.enabled or run_cfg.model.images:
        return None, "a run with tools or pictures is asked through them: its export is not measured here"
    data = json.loads(proof.read_text())
    rows = [r for r in data["rows"] if r.get("source") == "heldout"][: limit or None]
    c = data["config"]
    if not rows:
        return None, "the proof has no held-out rows"
    items, _ = collect_prompts(run_cfg, None, len(rows), [], None, None, c["seed"], local_only,
                               c.get("chosen_on") or 0)
    if [it["prompt"] for it in items] != [r["prompt"] for r in rows]:
        return None, "the proof's rows were not drawn again alike (the data changed since)"
    return ProofRows(items, [r["adapter"] for r in rows], run_cfg, int(c["max_new_tokens"])), None


def _scored(rows: ProofRows, name: str, texts: list[str]) -> Measured:
    cells = [score_cell({"text": t, "tokens": 0}, it["reference"], rows.run_cfg.reward, it["prompt"])
             for t, it in zip(texts, rows.items)]
    n = len(texts)
    return Measured(name, n, sum(bool(c.correct) for c in cells) / n,
                    sum(bool(a.get("correct")) for a in rows.adapter) / n,
                    sum(t == a.get("text") for t, a in zip(texts, rows.adapter)))


def measure_folder(folder: Path, rows: ProofRows) -> Measured:
    """The merged model in ``folder`` (transformers) on the proof's rows."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return measure_model(model, AutoTokenizer.from_pretrained(folder), rows, f"the merged model ({folder.name})")


def measure_model(model, tok, rows: ProofRows, name: str) -> Measured:
    """A loaded model (transformers) on the proof's rows, asked as every model is asked (app/ask)."""
    out = Asker(model, tok, None, rows.run_cfg).answers(rows.items, max_new_tokens=rows.max_new_tokens,
                                                         batch_size=16)
    return _scored(rows, name, [o["text"] for o in out])


def measure_gguf(path: Path, tok, rows: ProofRows) -> Measured:
    """A GGUF file on the proof's rows, in llama.cpp (a child process): its greedy tokens after each prompt's ids as
    the proof made them (the run's tokenizer and chat template), decoded as the proof decodes."""
    prompts = [tok(format_prompt(tok, it), add_special_tokens=adds_special_tokens(tok))["input_ids"]
               for it in rows.items]
    answers = greedy_answers(path, prompts, rows.max_new_tokens)
    return _scored(rows, path.name, [tok.decode(a, skip_special_tokens=True) for a in answers])


def greedy(llm, ids: list[int], most: int) -> list[int]:
    """llama.cpp's greedy tokens after ``ids`` (the most likely each time, the first on a tie, as transformers' greedy
    picks), up to an end-of-generation token or ``most``."""
    import llama_cpp
    import numpy as np

    llm.reset()
    llm.eval(list(ids))
    out: list[int] = []
    while len(out) < most:  # the last position's logits, as llama.cpp left them (no per-position copy kept)
        token = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            break
        out.append(token)
        llm.eval([token])
    return out


def _greedy_all(path: str, prompts: list[list[int]], most: int) -> list[list[int]]:
    context = max((len(p) for p in prompts), default=0) + most + 8
    llm = open_gguf(Path(path), n_ctx=max(256, context))
    try:
        return [greedy(llm, ids, most) for ids in prompts]
    finally:
        llm.close()


def greedy_answers(path: Path, prompts: list[list[int]], most: int = 32) -> list[list[int]]:
    """llama.cpp's greedy tokens after each of ``prompts`` (token ids), in a child process (a CPU fault there is one
    line, never the caller's end)."""
    return in_child(_greedy_all, str(path), prompts, most, what=f"answering with {Path(path).name}", timeout=3600)
