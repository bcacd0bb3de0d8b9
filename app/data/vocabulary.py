"""The words column names are read by: which words make a column a prompt, a reference, a passage, metadata.

Owns the synonym tables and how one column name scores for a role (``role_score``). A column name is split into
words (app.data.profile.name_words) before it is looked up, so "context" is never "text". Must not look at values
(app.data.detect weighs those). Standard library only.
"""

from __future__ import annotations

# Word -> weight for each role. Higher wins; a short final answer outranks a long worked solution (the reward needs
# the answer), and "text"/"content" are weak so that "target_text" is a reference and "input_text" a prompt.
PROMPT_WORDS = {
    "prompt": 100, "prompts": 95, "question": 100, "questions": 95, "problem": 100, "problems": 95,
    "instruction": 100, "instructions": 95, "query": 95, "queries": 90, "request": 85, "input": 85, "inputs": 85,
    "inp": 70, "human": 80, "user": 75, "statement": 60, "src": 60, "sentence": 55, "sentences": 50,
    "source": 50, "dialogue": 50, "dialog": 50, "utterance": 50, "premise": 50, "claim": 50, "message": 45,
    "conversation": 45, "transcript": 40, "text": 40, "content": 40, "post": 40, "document": 40, "article": 40,
    "body": 35, "context": 35, "ctx": 35, "passage": 35, "paragraph": 35, "abstract": 30,
    "messages": 45, "conversations": 45, "chat": 45, "turns": 45,
}
REFERENCE_WORDS = {
    "answer": 100, "answers": 95, "ans": 90, "gold": 95, "truth": 100, "gt": 90, "correct": 90, "decision": 85,
    "verdict": 85, "chosen": 85, "reference": 85, "references": 85, "target": 85, "targets": 85, "tgt": 80,
    "output": 80, "outputs": 80, "response": 80, "responses": 75, "completion": 80, "completions": 75,
    "solution": 78, "solutions": 75, "label": 75, "labels": 75, "reply": 75, "assistant": 75, "gpt": 75,
    "summary": 75, "bot": 70, "result": 70, "highlights": 70, "resp": 70, "out": 65, "sol": 65, "headline": 60,
    # classification targets
    "sentiment": 60, "emotion": 60, "intent": 60, "stance": 60, "polarity": 60, "class": 60,
}
# Whole-name-only abbreviations ("a" inside "is_a" means nothing).
WHOLE_PROMPT = {"q": 80, "x": 30}
WHOLE_REFERENCE = {"a": 80, "y": 30}
# Columns joined into the prompt. Passages go before the question, inputs and options after it.
PASSAGE_WORDS = {"context", "ctx", "passage", "document", "article", "paragraph", "background", "knowledge",
                 "evidence", "facts", "table", "schema", "abstract"}
AFTER_WORDS = {"input", "inputs", "choices", "options", "candidates", "endings", "hint", "hints", "choice", "option",
               "ending", "candidate", "hypothesis"}
CHOICE_WORDS = {"choices", "options", "candidates", "endings"}
# A word from here next to a role word makes the column metadata ("answer_start", "problem_source", "prompt_id").
METADATA_WORDS = {
    "id", "ids", "idx", "index", "uuid", "hash", "type", "types", "category", "categories", "level", "difficulty",
    "lang", "language", "length", "len", "count", "num", "score", "scores", "rating", "url", "link", "path", "file",
    "filename", "date", "time", "timestamp", "token", "tokens", "embedding", "embeddings", "model", "tag", "tags",
    "topic", "subject", "domain", "metadata", "meta", "split", "flag", "is", "has", "start", "end", "offset",
    "name", "source", "task", "format", "status", "version", "weight", "prob", "logprob", "rank", "system",
    # wrong answers are never the reference
    "rejected", "wrong", "incorrect", "negative", "bad", "distractor", "distractors", "false",
}
WEAK_WORDS = {"original", "raw", "old", "long", "alt", "alternative", "other", "extra", "prev", "previous"}
BOOST_WORDS = {"final", "short", "correct", "expected", "gold", "best", "clean", "ground"}


def role_score(words: list[str], table: dict[str, int], whole: dict[str, int]) -> tuple[int, str | None]:
    """(score, matched word). Metadata words next to a role word knock it out; weak words lower it."""
    if len(words) == 1 and words[0] in whole:
        return whole[words[0]], words[0]
    hits = [(table[w], w) for w in words if w in table]
    if not hits:
        return 0, None
    score, word = max(hits)
    others = [w for w in words if w != word]
    if any(w in METADATA_WORDS for w in others):
        return 0, None
    if any(w in WEAK_WORDS for w in others):
        score = int(score * 0.6)
    if any(w in BOOST_WORDS for w in others):
        score += 5
    if len(words) == 1:
        score += 3  # an exact name is a stronger signal than the same word inside a longer name
    return score, word
