"""Regenerate the detection corpus: one small file per schema, modelled on a public dataset's columns, with rows
invented here (no real dataset text). The expected detections live in expected.json and are written by hand --
never generated from the detector -- so the parametrised test in tests/data/test_detect.py can fail.

Run: python tests/data_schemas/make_corpus.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
N = 12
rng = random.Random(7)
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lia"]
THINGS = ["apples", "marbles", "stamps", "books", "shells", "coins"]
TOPICS = ["volcanoes", "tides", "bridges", "honey bees", "glaciers", "lighthouses", "comets", "deserts"]


def word_problem(i: int) -> tuple[str, int]:
    a, b = rng.randint(3, 60), rng.randint(2, 40)
    n, t = NAMES[i % len(NAMES)], THINGS[i % len(THINGS)]
    return f"{n} has {a} {t} and gets {b} more from a friend. How many {t} does {n} have now?", a + b


def passage(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return (f"The museum guide explained that {topic} have fascinated visitors for centuries. In the year "
            f"{1800 + 7 * i} a local society began recording observations about {topic}, and the records now fill "
            f"{i + 3} large volumes kept in the north wing.")


def conversation(i: int, style: str) -> list[dict]:
    q, ans = word_problem(i)
    if style == "sharegpt":
        return [{"from": "human", "value": q}, {"from": "gpt", "value": f"Adding them gives {ans}."},
                {"from": "human", "value": "Explain it to a child."}, {"from": "gpt", "value": f"Count on: {ans}."}]
    return [{"role": "system", "content": "You are a patient tutor."}, {"role": "user", "content": q},
            {"role": "assistant", "content": f"We add the two amounts: the total is {ans}."}]


def rows_for(name: str) -> list[dict]:
    out = []
    for i in range(N):
        q, ans = word_problem(i)
        sol = f"First note the starting amount. Then add the new ones. So the total is {ans}."
        boxed = f"{sol} The answer is $\\boxed{{{ans}}}$."
        topic = TOPICS[i % len(TOPICS)]
        r = {
            "gsm8k": {"question": q, "answer": f"{sol}\n#### {ans}"},
            "math": {"problem": q, "level": f"Level {1 + i % 3}", "type": ["Algebra", "Geometry"][i % 2],
                     "solution": boxed},
            "math500": {"problem": q, "solution": boxed, "answer": str(ans), "subject": "Prealgebra",
                        "level": 1 + i % 2, "unique_id": f"test/prealgebra/{100 + i}.json"},
            "openr1_math": {"problem": q, "solution": boxed, "answer": str(ans), "problem_type": "Algebra",
                            "question_type": "math-word-problem", "source": ["olympiads", "aops_forum"][i % 2],
                            "uuid": f"{i:08x}-1f2e-4d3c-9b8a-{i * 7919:012x}",
                            "is_reasoning_complete": [True, i % 2 == 0], "generations": [boxed, sol],
                            "correctness_math_verify": [True, False], "correctness_count": 1,
                            "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": boxed}]},
            "deepmath": {"question": q, "final_answer": str(ans), "difficulty": 2.5 + i % 3,
                         "topic": "Mathematics -> Algebra -> Arithmetic", "r1_solution_1": boxed,
                         "r1_solution_2": boxed, "r1_solution_3": boxed},
            "metamathqa": {"type": ["GSM_Rephrased", "GSM_AnsAug"][i % 2], "query": q,
                           "original_question": q.replace("gets", "receives"),
                           "response": f"{sol}\nThe answer is: {ans}"},
            "openmathinstruct2": {"problem": q, "generated_solution": boxed, "expected_answer": str(ans),
                                  "problem_source": "augmented_gsm8k"},
            "numina_cot": {"source": ["cn_k12", "orca_math"][i % 2], "problem": q, "solution": boxed,
                           "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": boxed}]},
            "alpaca": {"instruction": f"Write one sentence about {topic}." if i % 2 else "Add the two numbers.",
                       "input": "" if i % 2 else f"{i} and {i + 5}",
                       "output": f"{topic.capitalize()} are remarkable." if i % 2 else str(2 * i + 5),
                       "text": f"Below is an instruction. ### Instruction: ... ### Response: {i}"},
            "dolly": {"instruction": f"When did the society start recording {topic}?",
                      "context": passage(i) if i % 3 else "", "response": f"In {1800 + 7 * i}.",
                      "category": ["closed_qa", "open_qa", "brainstorming"][i % 3]},
            "sharegpt": {"id": f"conv_{i:05d}", "conversations": conversation(i, "sharegpt")},
            "messages": {"messages": conversation(i, "openai")},
            "squad": {"id": f"5733be284776f41900{i:06d}", "title": topic.replace(" ", "_"), "context": passage(i),
                      "question": f"In which year did the society begin recording {topic}?",
                      "answers": {"text": [str(1800 + 7 * i)], "answer_start": [60 + i]}},
            "arc": {"id": f"Mercury_{7000 + i}", "question": f"Which tool best measures the mass of {THINGS[i % 6]}?",
                    "choices": {"text": ["a balance", "a ruler", "a thermometer", "a clock"],
                                "label": ["A", "B", "C", "D"]}, "answerKey": "ABCD"[i % 4]},
            "flan": {"inputs": f"Summarise: {passage(i)}", "targets": f"A society records {topic}.",
                     "task_source": "Flan2021", "task_name": ["cnn_dailymail", "xsum"][i % 2],
                     "template_type": ["zs_opt", "fs_noopt"][i % 2]},
            "preference": {"prompt": q, "chosen": f"{sol} Answer: {ans}", "rejected": f"I think it is {ans + 3}."},
            "text_only": {"text": passage(i)},
            "sql_context": {"question": f"How many rows mention {topic}?",
                            "context": "CREATE TABLE notes (id INTEGER, topic VARCHAR)",
                            "answer": f"SELECT COUNT(*) FROM notes WHERE topic = '{topic}'"},
            "pubmedqa": {"pubid": 2000000 + i, "question": f"Do {topic} change with the seasons?",
                         "context": {"contexts": [passage(i), passage(i + 1)], "labels": ["BACKGROUND", "RESULTS"]},
                         "long_answer": f"Across {i + 3} volumes the records show clear seasonal change in {topic}.",
                         "final_decision": ["yes", "no", "maybe"][i % 3]},
            "samsum": {"id": f"1373{i:04d}", "dialogue": f"{NAMES[i]}: Did you see the {topic}?\n"
                                                          f"{NAMES[i - 1]}: Yes, on Sunday! It was huge.",
                       "summary": f"{NAMES[i - 1]} saw the {topic} on Sunday."},
            "triviaqa": {"question": f"Which town keeps {i + 3} volumes about {topic}?", "question_id": f"tc_{i}",
                         "answer": {"value": NAMES[i] + "ville", "aliases": [NAMES[i] + "ville"],
                                    "normalized_value": NAMES[i].lower() + "ville"}},
            "boolq": {"question": f"do {topic} have a museum wing", "passage": passage(i), "answer": i % 2 == 0},
            "trl_prompt_only": {"prompt": [{"role": "user", "content": q}], "ground_truth": str(ans)},
            "trl_prompt_completion": {"prompt": [{"role": "user", "content": q}],
                                      "completion": [{"role": "assistant", "content": f"{sol}"}]},
            "human_assistant": {"human": q, "assistant": f"The total is {ans}."},
            "camel_case": {"questionText": q, "correctAnswer": str(ans), "explanation": sol,
                           "questionId": f"Q{i:04d}"},
            "orca": {"id": f"niv.{i}", "system_prompt": "You are an AI assistant. Think step by step.",
                     "question": q, "response": sol},
            "unnamed_pair": {"english": f"The {topic} are near the river.", "french": f"Les {topic} sont proches."},
            "mixed_meta": {"uid": f"{i:032x}", "lang": "en", "instruction": q, "label": str(ans),
                           "num_tokens": 20 + i},
        }[name]
        out.append(r)
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = ["gsm8k", "math", "math500", "openr1_math", "deepmath", "openmathinstruct2", "numina_cot", "dolly",
             "messages", "squad", "arc", "flan", "preference", "text_only", "sql_context", "pubmedqa", "samsum",
             "triviaqa", "boolq", "trl_prompt_only", "trl_prompt_completion", "human_assistant", "camel_case"]
    for name in jsonl:
        write_jsonl(HERE / f"{name}.jsonl", rows_for(name))
    # JSON arrays
    (HERE / "alpaca.json").write_text(json.dumps(rows_for("alpaca"), indent=1))
    (HERE / "metamathqa.json").write_text(json.dumps(rows_for("metamathqa")))
    (HERE / "sharegpt.json").write_text(json.dumps(rows_for("sharegpt"), indent=1))
    # {"data": [...]} wrapper, as some exports do
    (HERE / "wrapped_orca.json").write_text(json.dumps({"version": 1, "data": rows_for("orca")}))
    # Parquet (MMLU-style choices list + integer answer; CNN/DailyMail-style summarisation)
    mmlu = [{"question": f"What is {i} + {i + 2}?", "subject": "elementary_mathematics",
             "choices": [str(2 * i + 2), str(2 * i + 1), str(2 * i + 3), str(i)], "answer": 0} for i in range(N)]
    pq.write_table(pa.Table.from_pylist(mmlu), HERE / "mmlu.parquet")
    cnn = [{"article": passage(i) * 3, "highlights": f"Society records {TOPICS[i % 8]}.", "id": f"{i:040x}"}
           for i in range(N)]
    pq.write_table(pa.Table.from_pylist(cnn), HERE / "cnn_dailymail.parquet")
    # CSV with capitalised headers; counselling-style Context/Response; IMDB-style text + integer label; TSV
    problems = [word_problem(i) for i in range(N)]
    pd.DataFrame([{"Question": q, "Answer": a} for q, a in problems]).to_csv(HERE / "caps_headers.csv", index=False)
    pd.DataFrame([{"Context": f"I feel nervous about the exam on {TOPICS[i % 8]}.",
                   "Response": "That is understandable; let's plan your week together."} for i in range(N)]).to_csv(
        HERE / "counsel.csv", index=False)
    pd.DataFrame([{"text": passage(i), "label": i % 2} for i in range(N)]).to_csv(HERE / "imdb.csv", index=False)
    pd.DataFrame([{"Input Text": q, "Target Text": str(a), "split": "train"} for q, a in problems]).to_csv(HERE / "spaced_headers.tsv", sep="\t", index=False)
    write_jsonl(HERE / "unnamed_pair.jsonl", rows_for("unnamed_pair"))
    write_jsonl(HERE / "mixed_meta.jsonl", rows_for("mixed_meta"))
    preference_layouts()


def preference_layouts() -> None:
    """Preference pairs in the layouts people publish (issue #34); after the others, so their rows stay as they were."""
    def turns(q: str, a: str) -> list[dict]:
        return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]

    hh, ultra, pku, arena = [], [], [], []
    for i in range(N):
        q, ans = word_problem(i)
        good, bad = f"Adding them gives {ans}.", f"It is {ans + 1 + i % 3}, I believe."
        # Anthropic HH-RLHF: whole transcripts, the prompt is the shared prefix
        hh.append({"chosen": f"\n\nHuman: {q}\n\nAssistant: {good}",
                   "rejected": f"\n\nHuman: {q}\n\nAssistant: {bad}"})
        # UltraFeedback binarized: prompt + chosen / rejected conversations + their scores
        ultra.append({"prompt": q, "prompt_id": f"{i * 7919:064x}", "chosen": turns(q, good),
                      "rejected": turns(q, bad),
                      "messages": turns(q, good), "score_chosen": 8.0 + i % 2, "score_rejected": 3.0})
        # PKU-SafeRLHF: two responses and the id of the better one
        first_better = i % 2 == 0
        pku.append({"prompt": q, "response_0": good if first_better else bad,
                    "response_1": bad if first_better else good,
                    "is_response_0_safe": True, "is_response_1_safe": True,
                    "better_response_id": 0 if first_better else 1})
        # Chatbot-Arena style: two conversations, the winner named, no prompt column
        a_wins = i % 3 != 1
        arena.append({"question_id": f"{i:032x}", "model_a": "model-x", "model_b": "model-y",
                      "winner": "model_a" if a_wins else "model_b",
                      "conversation_a": turns(q, good if a_wins else bad),
                      "conversation_b": turns(q, bad if a_wins else good)})
    write_jsonl(HERE / "hh_rlhf.jsonl", hh)
    write_jsonl(HERE / "ultrafeedback.jsonl", ultra)
    write_jsonl(HERE / "pku_saferlhf.jsonl", pku)
    write_jsonl(HERE / "arena_pairs.jsonl", arena)


if __name__ == "__main__":
    main()
