"""Field detection: a corpus of schemas modelled on public datasets (tests/data_schemas/, expectations written by
hand in expected.json), extra synonym variants, overrides and the errors a user can hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import SCHEMAS

from app.data import DataError, Detection, detect_fields, resolve_dataset
from app.data.detect import detect_from_rows
from app.data.preview import inspect_detection
from app.data.profile import name_words
from app.errors import UserError

CORPUS = SCHEMAS
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
KEYS = ("format", "prompt_field", "reference_field", "context_fields", "messages_field")
PAIR_KEYS = ("chosen_field", "rejected_field", "pair_fields", "preference_field")  # None unless expected.json says


def _roles(det: Detection, expected: dict) -> dict:
    d = det.to_dict()
    return {k: d[k] for k in KEYS + tuple(k for k in PAIR_KEYS if k in expected or d[k] is not None)}


def test_corpus_is_big_enough_and_complete():
    assert len(EXPECTED) >= 20
    for name in EXPECTED:
        assert (CORPUS / name).is_file(), name
    kinds = {Path(n).suffix for n in EXPECTED}
    assert {".jsonl", ".json", ".csv", ".parquet", ".tsv"} <= kinds


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_detection_full_load(name):
    """The training path: full load, detection on a spread sample."""
    det = detect_fields(resolve_dataset(str(CORPUS / name))["train"])
    assert _roles(det, EXPECTED[name]) == EXPECTED[name], det.reasons


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_detection_inspect_path(name):
    """The inspect path reads only the first rows of big files; it must agree with the training path."""
    det, rows, split = inspect_detection(str(CORPUS / name), None, None, None, None, False)
    assert _roles(det, EXPECTED[name]) == EXPECTED[name], det.reasons
    assert det.num_rows == 12 and split == "train" and rows


def _rows(**cols):
    n = len(next(iter(cols.values())))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def _prose(i, words=12):
    vocab = "the river stone bright calm seven under over green blue table light dark quick".split()
    return " ".join(vocab[(i * 7 + j * 3) % len(vocab)] for j in range(words)) + f" {i}"


def _detect(rows):
    return detect_from_rows(rows, list(rows[0]), num_rows=len(rows))


R = range(20)


@pytest.mark.parametrize("rows, prompt, reference", [
    (_rows(Problem=[_prose(i) for i in R], Solution=[_prose(i, 40) for i in R], Answer=[str(i) for i in R]),
     "Problem", "Answer"),
    (_rows(query=[_prose(i) for i in R], response=[_prose(i, 30) for i in R]), "query", "response"),
    (_rows(input=[_prose(i) for i in R], target=[_prose(i, 5) for i in R]), "input", "target"),
    (_rows(src=[_prose(i) for i in R], tgt=[_prose(i, 5) for i in R]), "src", "tgt"),
    (_rows(source=[_prose(i) for i in R], completion=[_prose(i, 5) for i in R]), "source", "completion"),
    (_rows(content=[_prose(i, 50) for i in R], url=[f"http://x/{i}" for i in R]), "content", None),
    (_rows(id=[str(i) for i in R], title=[_prose(i, 2) for i in R], text=[_prose(i, 80) for i in R]), "text", None),
    (_rows(q=[_prose(i) for i in R], a=[_prose(i, 3) for i in R]), "q", "a"),
    (_rows(QUESTION=[_prose(i) for i in R], ANSWER=[str(i) for i in R]), "QUESTION", "ANSWER"),
    (_rows(questionText=[_prose(i) for i in R], groundTruth=[str(i) for i in R]), "questionText", "groundTruth"),
    (_rows(**{"Problem Statement": [_prose(i) for i in R], "Gold Answer": [str(i) for i in R]}),
     "Problem Statement", "Gold Answer"),
    (_rows(sentence=[_prose(i) for i in R], label=[i % 3 for i in R]), "sentence", "label"),
    (_rows(question=[f"{i}*7" for i in R], answer=[i * 7 for i in R]), "question", "answer"),  # no spaces, ints
    (_rows(instruction=["Translate to French."] * 20, input=[_prose(i) for i in R], output=[_prose(i) for i in R]),
     "instruction", "output"),
    (_rows(prompt=[_prose(i) for i in R], story=[_prose(i, 90) for i in R]), "prompt", "story"),
    (_rows(question=[_prose(i) for i in R], reasoning=[_prose(i, 60) for i in R], answer=[str(i) for i in R]),
     "question", "answer"),
    (_rows(prompt_id=[f"{i:032x}" for i in R], prompt=[_prose(i) for i in R], chosen=[_prose(i) for i in R],
           rejected=[_prose(i + 1) for i in R], score_chosen=[8.0] * 20), "prompt", "chosen"),
    (_rows(english=[_prose(i) for i in R], german=[_prose(i + 3) for i in R]), "english", "german"),  # by position
    (_rows(tweet=[_prose(i) for i in R], sentiment=["positive", "negative"] * 10), "tweet", "sentiment"),
    (_rows(data_source=["gsm8k"] * 20, prompt=[[{"role": "user", "content": _prose(i)}] for i in R],
           reward_model=[{"style": "rule", "ground_truth": str(i)} for i in R]), "prompt", "reward_model"),  # verl
])
def test_synonyms_and_values(rows, prompt, reference):
    det = _detect(rows)
    assert (det.prompt_field, det.reference_field) == (prompt, reference), det.reasons
    assert det.reasons["prompt_field"] and det.reasons["reference_field"]


def test_words_not_substrings():
    # 'context' contains 'text' as a substring; only whole words count.
    assert name_words("context") == ["context"]
    assert name_words("answerKey") == ["answer", "key"]
    assert name_words("generated_solution") == ["generated", "solution"]
    assert name_words("Input Text") == ["input", "text"]
    assert name_words("sentence1") == ["sentence", "1"]
    det = _detect(_rows(context=[_prose(i, 40) for i in R], question=[_prose(i) for i in R],
                        answer=[str(i) for i in R]))
    assert det.prompt_field == "question" and det.context_fields == ["context"]


def test_short_final_answer_beats_worked_solution_and_sft_keeps_solution():
    rows = _rows(problem=[_prose(i) for i in R], generated_solution=[_prose(i, 60) for i in R],
                 expected_answer=[str(i) for i in R])
    det = _detect(rows)
    assert det.reference_field == "expected_answer"
    assert det.solution_field == "generated_solution"
    assert "solution_field" not in det.to_dict()
    assert "generated_solution" in det.reasons["reference_field"]


def test_metadata_columns_are_not_roles():
    rows = _rows(uid=[f"{i:032x}" for i in R], problem_source=["synthetic_math"] * 20,
                 answer_start=[i for i in R], problem=[_prose(i) for i in R], answer=[str(i) for i in R])
    det = _detect(rows)
    assert (det.prompt_field, det.reference_field, det.context_fields) == ("problem", "answer", [])


def test_categorical_source_is_not_a_prompt_in_chat_data():
    rows = _rows(source=["lmsys/arena", "sharegpt"] * 10,
                 conversation=[[{"role": "user", "content": _prose(i)}, {"role": "assistant", "content": "ok"}]
                               for i in R])
    det = _detect(rows)
    assert det.format == "chat" and det.messages_field == "conversation" and det.prompt_field is None


def test_preference_conversations_are_pairs_with_the_shared_prompt():
    def turn(i, a):
        return [{"role": "user", "content": _prose(i)}, {"role": "assistant", "content": _prose(a)}]

    rows = _rows(chosen=[turn(i, i + 1) for i in R], rejected=[turn(i, i + 5) for i in R])
    det = _detect(rows)
    assert (det.format, det.prompt_field, det.chosen_field, det.rejected_field) == ("preference", None, "chosen",
                                                                                     "rejected")
    from app.data.convert import completion_text, prompt_text, reference_text

    # SFT on pairs learns the chosen answer; GRPO and compare see the shared prompt and judge by the chosen answer
    assert prompt_text(rows[0], det) == _prose(0)
    assert completion_text(rows[0], det) == reference_text(rows[0], det) == _prose(1)


def test_to_dict_has_exactly_the_json_keys():
    det = _detect(_rows(question=[_prose(i) for i in R], answer=[str(i) for i in R]))
    d = det.to_dict()
    assert list(d) == ["format", "prompt_field", "reference_field", "context_fields", "messages_field", "columns",
                       "num_rows", "reasons", "chosen_field", "rejected_field", "pair_fields", "preference_field",
                       "desirable_field"]
    json.dumps(d)
    assert isinstance(det, Detection) and d["num_rows"] == 20


def test_overrides_win_and_are_case_insensitive():
    rows = _rows(Question=[_prose(i) for i in R], Notes=[_prose(i, 4) for i in R], Answer=[str(i) for i in R])
    det = detect_from_rows(rows, list(rows[0]), prompt_field="notes", reference_field="Question")
    assert (det.prompt_field, det.reference_field) == ("Notes", "Question")
    assert "override" in det.reasons["prompt_field"] and "override" in det.reasons["reference_field"]


def test_unknown_override_lists_columns():
    rows = _rows(question=[_prose(i) for i in R], answer=[str(i) for i in R])
    with pytest.raises(DataError) as e:
        detect_from_rows(rows, list(rows[0]), prompt_field="questoin")
    msg = str(e.value)
    assert "questoin" in msg and "question, answer" in msg and "\n" not in msg
    with pytest.raises(DataError, match="--reference-field 'gold'"):
        detect_from_rows(rows, list(rows[0]), reference_field="gold")


def test_no_text_column_is_an_error():
    rows = _rows(x=[i for i in R], y=[i * 2.5 for i in R])
    with pytest.raises(DataError, match="no text-like column") as e:
        _detect(rows)
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_text_only_has_no_reference():
    det = _detect(_rows(text=[_prose(i, 60) for i in R]))
    assert det.prompt_field == "text" and det.reference_field is None and det.format == "columns"
    assert "text-only" in det.reasons["reference_field"]


def test_detection_cost_is_bounded_by_the_sample(monkeypatch):
    from datasets import Dataset

    ds = Dataset.from_dict({"question": [_prose(i) for i in range(5000)], "answer": [str(i) for i in range(5000)]})
    seen = []
    orig = Dataset.select

    def spy(self, indices, *a, **k):
        seen.append(len(list(indices)))
        return orig(self, indices, *a, **k)

    monkeypatch.setattr(Dataset, "select", spy)
    det = detect_fields(ds, sample_rows=32)
    assert seen == [32] and det.num_rows == 5000 and det.prompt_field == "question"


def test_chat_data_is_judged_by_its_last_assistant_turn(tmp_path):
    """ShareGPT and OpenAI messages: the answer each conversation ends with is the reference (GRPO's reference
    component, compare's accuracy); a conversation that ends with a user turn keeps that question in its prompt."""
    from app.data.convert import prompt_messages, prompt_text, reference_text

    share = [{"conversations": [{"from": "human", "value": f"What is {i} plus one?"},
                                {"from": "gpt", "value": f"It is {i + 1}."}]} for i in range(12)]
    det = detect_from_rows(share, ["conversations"])
    assert (det.format, det.messages_field, det.reference_field) == ("chat", "conversations", "conversations")
    assert "last assistant turn" in det.reasons["reference_field"]
    assert reference_text(share[3], det) == "It is 4." and prompt_text(share[3], det) == "What is 3 plus one?"
    open_ended = {"conversations": [{"from": "human", "value": "Hi, what is 2+2?"}, {"from": "gpt", "value": "4."},
                                    {"from": "human", "value": "And 3+3?"}]}
    msgs = prompt_messages(open_ended, det, None)
    assert [m["content"] for m in msgs] == ["Hi, what is 2+2?", "4.", "And 3+3?"]  # the last question stays
    assert reference_text(open_ended, det) is None  # and it has no answer to judge against
    # the GRPO rows carry the references (the run used to say "dataset has no reference field")
    from app.data import to_grpo

    class NoTemplate:
        chat_template = None

    from datasets import Dataset

    rows = to_grpo(Dataset.from_list(share), det, NoTemplate(), None)
    assert rows[3]["reference"] == "It is 4."
    # a column-less text dataset says how to set one, in the UI's words and the CLI's
    text_only = detect_from_rows([{"text": _prose(i)} for i in R], ["text"])
    assert "Reference field in the UI" in text_only.reasons["reference_field"]


def test_reference_found_by_its_values_in_any_language(tmp_path):
    """A `Frage;Antwort` CSV (German headers, numeric answers) and a column of '#### N' answers are references
    by their values; a column of row numbers is not."""
    p = tmp_path / "aufgaben.csv"
    p.write_text("Frage;Antwort\n" + "".join(f"Anna hat {i} Äpfel und kauft {i + 2} dazu. Wie viele hat sie?;"
                                              f"{2 * i + 2}\n" for i in range(3, 23)))
    det, _, _ = inspect_detection(str(p), None, None, None, None, False)
    assert (det.prompt_field, det.reference_field) == ("Frage", "Antwort")
    assert "its values are answers (short numbers)" in det.reasons["reference_field"]
    marked = [{"aufgabe": f"Tom hat {i} Murmeln und findet {i} weitere. Wie viele sind es?",
               "loesung": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(3, 15)]
    det = detect_from_rows(marked, ["aufgabe", "loesung"])
    assert det.reference_field == "loesung"
    from app.data.profile import profile_column
    from app.data.rules import _answer_values

    assert _answer_values(profile_column("loesung", [r["loesung"] for r in marked])) == "answers ending in #### N"
    assert _answer_values(profile_column("aufgabe", [r["aufgabe"] for r in marked])) is None
    ids = [{"nr": i, "frage": f"Wie viele Tage hat die Woche {i}?"} for i in range(1, 15)]
    assert detect_from_rows(ids, ["nr", "frage"]).reference_field is None


@pytest.mark.parametrize("good, bad", [(True, False), ("yes", "no"), ("True", "False"), (1, 0), ("1", "0"),
                                       ("\U0001F44D", "\U0001F44E"), ("Good", "bad"), ("accepted", "rejected")])
def test_labels_as_people_write_them_mark_the_answers_to_learn(good, bad):
    """A label column spelled any common way is the unpaired data's good / bad column (KTO's label)."""
    from app.data.profile import label_value

    rows = _rows(prompt=[_prose(i) for i in R], completion=[_prose(i + 50) for i in R],
                 label=[good if i % 2 else bad for i in R])
    det = _detect(rows)
    assert det.desirable_field == "label", det.to_dict()
    assert [label_value(r["label"]) for r in rows[:2]] == [False, True]
    assert "label label (good / bad" in det.fields_line()


def test_a_label_column_whose_values_spell_no_label_is_named_in_the_refusal():
    from app.data.preference import require_labels
    from app.errors import UserError

    det = _detect(_rows(prompt=[_prose(i) for i in R], completion=[_prose(i + 50) for i in R],
                        label=["maybe" if i % 2 else "sure" for i in R]))
    assert det.desirable_field is None
    with pytest.raises(UserError, match=r"column 'label' holds 'sure', 'maybe', which spell no good / bad label"):
        require_labels(det)
