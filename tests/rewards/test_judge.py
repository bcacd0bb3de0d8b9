"""Rewards for open-ended tasks: the reference match per column kind, ROUGE-L overlap, the JSON and pattern components,
the judge (a real local OpenAI-compatible HTTP server: good, garbage, hanging, refusing, flaky; the memory plan of a
local judge), and their one-line refusals."""

import json
import re
import threading
import time

import pytest
from conftest import cli, cli_here
from judge_server import JudgeServer, _Judge
from repo_paths import ROOT

from app.config.schema import AppConfig, JudgeConfig, RewardConfig
from app.errors import UserError
from app.rewards import build_reward_funcs, explain_completion, score_completion
from app.rewards import match as M
from app.rewards.formats import JsonReward, RegexReward, check_schema
from app.rewards.judge.reward import JudgeReward, check_judge

CORPUS = ROOT / "tests" / "data_schemas"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"


# ------------------------------------------------------------------------------------------ reference match


SUMMARIES = [
    "The council approved a new park on the east bank after a long debate about its cost and who would maintain it.",
    "Heavy rain closed two schools and flooded several streets in the town centre for most of the week.",
    "The museum reopened its north wing, which now shows three centuries of local weather records.",
    "A local bakery doubled its staff after its sourdough won a national prize in the spring.",
]


def test_the_reference_match_is_chosen_per_column_kind_on_real_looking_data():
    if GSM8K.is_file():  # the real GSM8K train set: worked solutions ending in "#### N"
        refs = [json.loads(line)["answer"] for line in GSM8K.read_text().splitlines()[:200]]
        assert M.choose(refs)[0] == "numeric"
    squad = [json.loads(line)["answers"]["text"][0] for line in (CORPUS / "squad.jsonl").read_text().splitlines()]
    assert M.choose(squad) == ("numeric", f"{len(squad)} of {len(squad)} references read are numbers")
    trivia = ["Paris", "Blue whale", "Marie Curie", "The Pacific Ocean", "Mount Everest", "1969", "Jupiter"]
    mode, why = M.choose(trivia)
    assert mode == "exact" and "median of 2 word(s)" in why
    assert M.choose([r"\frac{1}{2}", r"\sqrt{2}", "3", r"2\pi", r"x^2 + 1"])[0] == "math"
    mode, why = M.choose(SUMMARIES)
    assert mode == "overlap" and "free text" in why and "ROUGE-L" in why
    # a column of paragraphs with a few short rows is still free text; an empty column says so
    assert M.choose(SUMMARIES + ["Yes."])[0] == "overlap"
    assert M.choose([None, "  "])[0] == "numeric"


def test_each_mode_compares_its_own_way():
    def score(mode, text, ref):
        return M.score(mode, text, ref)[0]

    assert score("exact", "Final answer: the Pacific Ocean.", "The Pacific ocean") == 1.0
    assert score("exact", "Final answer: 1,000", "1000") == 0.0  # exact is text: numbers are numeric's job
    assert score("numeric", "Final answer: 1,000", "1000") == 1.0
    assert score("math", r"Final answer: \frac{1}{2}", "0.5") == 1.0
    assert score("exact", r"Final answer: \frac{1}{2}", "0.5") == 0.0
    assert score("exact", "Final answer: (B) Paris", "B") == 1.0
    ref = SUMMARIES[1]
    close = score("overlap", "Final answer: Heavy rain flooded streets in the town centre and closed two schools.", ref)
    far = score("overlap", "Final answer: The bakery won a prize for its bread.", ref)
    assert 0.4 < close < 1.0 and far < 0.2 and score("overlap", ref, ref) == 1.0
    assert score("overlap", "", ref) == 0.0 and M.score("overlap", "x", None) == (None, "no reference")


PEOPLE = ['{"name": "Alice", "age": 31, "city": "Paris"}', '{"name": "Bo", "age": 4, "city": "Oslo"}',
          '{"name": "Chen Li", "age": 58, "city": "Xi\'an"}', '[{"sku": "A-1", "qty": 2}]']


def test_json_references_are_matched_as_json_never_as_math_and_code_is_not_latex():
    """A JSON-extraction column is json (it used to be read as LaTeX for its braces, its answer as its last number);
    code and multi-line text are overlap; an answer equal to its reference scores 1 in every mode."""
    mode, why = M.choose(PEOPLE)
    assert mode == "json" and "4 of 4 references read are JSON objects or lists" in why
    for m in ("exact", "numeric", "math", "json", "overlap", "auto"):
        value = M.score(m if m != "auto" else M.choose([PEOPLE[0]])[0], PEOPLE[0], PEOPLE[0])[0]
        assert value == 1.0, m
    assert M.score("json", 'Sure!\n```json\n{"city": "paris", "name": "Alice", "age": 31.0}\n```', PEOPLE[0]) == (
        1.0, "the answer's JSON equals the reference")  # key order, case and 31 = 31.0 do not matter
    assert M.score("json", '{"name": "Alice", "age": 30, "city": "Paris"}', PEOPLE[0]) == (
        0.6667, "2 of 3 fields match (not: age)")
    assert M.score("json", "Alice, 31, Paris", PEOPLE[0]) == (0.0, "no JSON in the answer")
    assert M.score("json", '[{"qty": 2, "sku": "a-1"}]', PEOPLE[3])[0] == 1.0
    code = ["def double(x):\n    return x * 2", "SELECT name FROM users WHERE age > 30;", "x = a[0] / b[1];"]
    assert M.choose(code)[0] == "overlap"
    assert M.choose([r"\frac{1}{2}", r"\sqrt{2}", "3/4"])[0] == "math"  # LaTeX is still math


def test_score_and_inspect_say_json_for_a_json_extraction_file(tmp_path):
    rows = [{"text": f"Person {i} lives somewhere.", "answer": PEOPLE[i % 3]} for i in range(12)]
    data = tmp_path / "extract.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli_here("score", "--completion", PEOPLE[0], "--reference", PEOPLE[0], "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["components"]["reference"] == 1.0
    shown = cli_here("inspect", str(data))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"reference match\s*│\s*json\s*│\s*12 of 12 references read are JSON objects", shown.stdout)


def test_overlap_is_rouge_score_rouge_l():
    """The maintained implementation, not ours: on English text our tokenizer gives rouge-score's own figure."""
    from rouge_score import rouge_scorer

    theirs = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    for pred in ("Heavy rains were flooding the streets and closing schools.", "A bakery doubled its staff."):
        for ref in SUMMARIES:
            assert M.rouge_l(pred, ref) == pytest.approx(theirs.score(ref, pred)["rougeL"].fmeasure)
    assert M.rouge_l("東京は日本の首都です", "日本の首都は東京です") > 0.5  # rouge-score alone scores CJK 0


def test_the_reference_component_takes_the_configured_mode():
    cfg = RewardConfig(reference_match="overlap")
    s = score_completion("Final answer: Heavy rain closed two schools and flooded streets.", SUMMARIES[1], cfg)
    assert 0.3 < s["components"]["reference"] < 1.0
    auto = score_completion("Final answer: Heavy rain closed two schools and flooded streets.", SUMMARIES[1])
    assert auto["components"]["reference"] == s["components"]["reference"]  # auto on one long reference: overlap
    exact = RewardConfig(reference_match="exact")
    assert score_completion("Final answer: Heavy rain closed two schools.", SUMMARIES[1], exact)["components"][
        "reference"] == 0.0
    with pytest.raises(ValueError, match="reference_match"):
        RewardConfig(reference_match="fuzzy")


def test_a_grpo_plan_records_the_match_it_chose_and_why(tmp_path, tiny_model):
    from app.data import build_splits
    from app.train.planning.plan import make_plan

    p = tmp_path / "sum.jsonl"
    p.write_text("".join(json.dumps({"text": f"Summarise: story {i}.", "summary": SUMMARIES[i % 4]}) + "\n"
                         for i in range(24)))
    cfg = AppConfig.model_validate({"method": "grpo", "model": {"name_or_path": str(tiny_model)},
                                    "data": {"dataset": str(p)}})
    rows, _, det = build_splits(cfg.data, 0)
    said = []
    plan = make_plan(cfg, rows, det, note=said.append)
    assert plan.cfg.reward.reference_match == "overlap"
    assert any(line.startswith("reference match: overlap (free text") for line in said)
    assert "reward.reference_match: auto -> overlap" in plan.config_yaml()
    fixed = make_plan(cfg.model_copy(update={"reward": RewardConfig(reference_match="exact")}), rows, det)
    assert fixed.cfg.reward.reference_match == "exact"  # a mode the user set is kept


# ------------------------------------------------------------------------------------------ format components


def test_json_component_scores_parse_and_schema(tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "required": ["name", "age"],
                                  "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}))
    j = JsonReward(str(schema))
    out = j(['{"name": "Ada", "age": 36}', 'Here: ```json\n{"name": "Ada", "age": "old"}\n```', '{"name": "Ada"',
             "Ada is 36.", '<think>{"x": 1}</think>{"name": "Bo", "age": 3}'])
    assert out == [1.0, 0.5, 0.0, 0.0, 1.0]
    value, why = j.score('{"name": "Ada", "age": "old"}', None)
    assert value == 0.5 and "age" in why and "integer" in why
    import pickle

    assert pickle.loads(pickle.dumps(j))(['{"name": "A", "age": 1}']) == [1.0]  # TRL may copy reward functions
    cfg = RewardConfig(json_schema=str(schema))
    assert [f.__name__ for f in build_reward_funcs(cfg, True)[0]][-1] == "json"
    assert RewardConfig(weights={"json": 1.0}).opted_in("json") and not RewardConfig().opted_in("json")


def test_bad_schema_files_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no file"):
        check_schema(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="is not JSON"):
        check_schema(str(tmp_path / "bad.json"))
    (tmp_path / "wrong.json").write_text(json.dumps({"type": "no-such-type"}))
    with pytest.raises(UserError, match="not a valid JSON Schema"):
        check_schema(str(tmp_path / "wrong.json"))


def test_regex_component_and_its_time_bound():
    r = RegexReward(must=r"^\d{3}-\d{4}$", forbid=r"(?i)\bsorry\b")
    assert r(["555-1234", "Sorry!\n555-1234", "call me", "<think>sorry</think>555-0000"]) == [1.0, 0.5, 0.5, 1.0]
    assert RegexReward(forbid="x")(["abc", "xyz"]) == [1.0, 0.0]
    slow = RegexReward(must=r"^(a|aa)+$")
    t0 = time.monotonic()
    assert slow(["a" * 40 + "b"]) == [None]  # catastrophic backtracking: None for that answer, counted
    assert time.monotonic() - t0 < 5 and slow.errors() == 1
    with pytest.raises(ValueError, match=r"reward.regex '\(' is not a regular expression"):
        RewardConfig(regex="(")
    with pytest.raises(ValueError, match="set reward.regex or reward.regex_forbid"):
        RewardConfig(weights={"regex": 1.0})


def test_format_settings_from_the_cli_are_one_line_with_nothing_made(tmp_path):
    (tmp_path / "bad.json").write_text("[1, 2")
    for args, needle in ((["--set", f"reward.json_schema={tmp_path / 'bad.json'}"], "is not JSON"),
                         (["--set", "reward.regex=(unclosed"], "is not a regular expression"),
                         (["--reference-match", "fuzzy"], "reference_match"),
                         (["--judge-url", "ftp://x"], "is not an http(s) URL")):
        r = cli_here("train", "--dataset", "arith", "--model", "arith-base", "--output-dir", str(tmp_path / "runs"), *args)
        assert r.returncode == 2, r.stderr
        err = r.stderr.strip()
        assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------------------------------- judge


@pytest.fixture()
def judge_server():
    _Judge.mode, _Judge.seen, _Judge.fails_left, _Judge.ok_left = "good", [], 0, 0
    server = JudgeServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def _judge(url, **kw) -> JudgeReward:
    return JudgeReward(JudgeConfig(url=url, **kw))


def test_a_judge_scores_through_an_openai_compatible_server_and_caches(judge_server):
    j = _judge(judge_server)
    prompts = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "Summarise the story."}]] * 3
    out = j(["abc", "abcdefgh", "abc"], prompts=prompts, reference=["r", "r", "r"])
    assert out == [0.3, 0.8, 0.3]  # the server scores by the answer's length: the answer reached the rubric
    asked = _Judge.seen
    assert len(asked) == 2  # the repeated completion was judged once
    assert asked[0]["model"] == "judge-7b" and asked[0]["temperature"] == 0  # the endpoint's first model
    assert asked[0]["response_format"]["type"] == "json_schema"  # structured output asked for
    text = asked[0]["messages"][0]["content"]
    assert "Summarise the story." in text and "be brief" not in text and "Reference answer:\nr" in text
    assert j(["abc"], prompts=prompts[:1], reference=["r"]) == [0.3] and len(_Judge.seen) == 2  # cached
    assert j.stats.summary()["judge"]["calls"] == 2 and j.stats.summary()["judge"]["failures"] == 0


def test_garbage_replies_and_hangs_are_counted_never_raised(judge_server):
    _Judge.mode = "garbage"
    j = _judge(judge_server, retries=2)
    assert j(["one", "two"], prompts=["p", "p"]) == [None, None]
    assert len(_Judge.seen) == 2  # an unreadable reply is not retried
    c = j.stats.summary()["judge"]
    assert (c["calls"], c["failures"], c["timeouts"]) == (2, 2, 0) and j.errors() == 2
    assert "no 0-10 score in the reply 'I like it a lot!'" in j.backend.last_failure

    _Judge.mode, _Judge.seen = "hang", []
    j = _judge(judge_server, timeout_s=0.5, retries=1)
    t0 = time.monotonic()
    assert j(["slow"], prompts=["p"]) == [None]
    assert time.monotonic() - t0 < 4 and len(_Judge.seen) == 2  # tried again once, then given up
    assert j.stats.summary()["judge"]["timeouts"] == 1 and "within 0.5 s" in j.backend.last_failure


def test_the_judge_falls_back_to_what_the_server_takes_and_retries_errors(judge_server):
    _Judge.mode = "no_json_schema"
    j = _judge(judge_server, model="mine")
    assert j(["abcd", "abcde"], prompts=["p", "p"]) == [0.4, 0.5]
    kinds = [(r.get("response_format") or {}).get("type") for r in _Judge.seen]
    assert kinds[0] == "json_schema" and kinds[-1] == "json_object" and kinds.count("json_object") == 2
    assert _Judge.seen[-1]["model"] == "mine"
    _Judge.mode, _Judge.fails_left = "flaky", 1
    j = _judge(judge_server, retries=1)
    assert j(["abcdef"], prompts=["p"]) == [0.6] and j.stats.summary()["judge"]["failures"] == 0


def test_a_server_that_is_down_is_a_counted_failure():
    j = _judge("http://127.0.0.1:9/v1", retries=0, timeout_s=2)
    assert j(["x"], prompts=["p"]) == [None] and j.stats.summary()["judge"]["failures"] == 1


def test_scores_are_read_in_the_forms_judges_write():
    from app.rewards.judge.rubric import parse_score

    cases = {'{"score": 7}': 0.7, '```json\n{"Score": 9}\n```': 0.9, "Score: 8/10": 0.8, "rating = 6": 0.6,
             "I would give this 4 out of 5.": 0.8, "<think>maybe 2</think>Score: 10": 1.0, "3": 0.3,
             "**Score:** 7.5": 0.75, "The answer is good": None, "Score: 11": None, '{"score": -1}': None,
             "": None, None: None}
    assert {k: parse_score(k) for k in cases} == cases


def test_rubric_files_and_local_only(tmp_path):
    from app.rewards.judge.rubric import load_rubric, render

    rubric = tmp_path / "r.txt"
    rubric.write_text('Grade {completion} for {prompt}. Reply {"score": N}.')
    text = render(load_rubric(str(rubric)), "the task", "my {reference} answer", "gold")
    assert text == 'Grade my {reference} answer for the task. Reply {"score": N}.'
    (tmp_path / "bad.txt").write_text("Grade the answer.")
    with pytest.raises(UserError, match=r"has no \{completion\}"):
        load_rubric(str(tmp_path / "bad.txt"))
    assert "127.0.0.1" in check_judge(JudgeConfig(url="http://127.0.0.1:8080/v1"), local_only=True)
    with pytest.raises(UserError, match="is not this machine and --local-only never leaves it"):
        check_judge(JudgeConfig(url="https://api.openai.com/v1"), local_only=True)
    assert "api.openai.com" in check_judge(JudgeConfig(url="https://api.openai.com/v1"), local_only=False)
    with pytest.raises(UserError, match="not found"):
        check_judge(JudgeConfig(model=str(tmp_path / "no-model")), local_only=True)


def test_a_remote_judge_under_local_only_is_refused_before_anything(tmp_path):
    r = cli_here("train", "--dataset", "arith", "--model", "arith-base", "--local-only", "--judge-url",
            "https://judge.example.com/v1",
            "--output-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and "--local-only never leaves it" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_a_local_judge_is_counted_by_the_memory_plan_and_refused_when_it_cannot_fit(tiny_model):
    from app.train.planning.memory import estimate_memory
    from app.train.planning.plan import decide_machine, make_plan

    base = {"method": "grpo", "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"}, "data": {"dataset": "arith"}}
    plain = estimate_memory(AppConfig.model_validate(base))
    judged = estimate_memory(AppConfig.model_validate({**base, "reward": {"judge": {
        "model": "Qwen/Qwen2.5-7B-Instruct"}}}))
    assert plain["judge_gb"] == 0 and 3.5 < judged["judge_gb"] < 7
    assert judged["total_gb"] == pytest.approx(plain["total_gb"] + judged["judge_gb"], abs=0.6)
    remote = estimate_memory(AppConfig.model_validate({**base, "reward": {"judge": {
        "url": "http://127.0.0.1:8080/v1", "model": "Qwen/Qwen2.5-7B-Instruct"}}}))
    assert remote["judge_gb"] == 0  # an endpoint's model is not in this process
    big = AppConfig.model_validate({**base, "model": {"name_or_path": str(tiny_model)},
                                    "reward": {"judge": {"model": "Qwen/Qwen2.5-32B-Instruct"}}})
    with pytest.raises(UserError, match=r"the local judge model \(Qwen/Qwen2.5-32B-Instruct\) takes"):
        make_plan(big, machine=decide_machine(big, card_gb=16), offline=True)


def test_explain_passes_the_prompt_to_the_judge(judge_server):
    cfg = RewardConfig(judge=JudgeConfig(url=judge_server))
    rows = explain_completion("abcdefg", "gold", cfg, prompt="Say seven letters.")
    judged = next(r for r in rows if r["name"] == "judge")
    assert judged["value"] == 0.7 and judged["weight"] == 2.0 and judged["why"] == "judge: 7/10"
    assert "Say seven letters." in _Judge.seen[-1]["messages"][0]["content"]


def test_the_train_form_sets_the_match_the_format_checks_and_the_judge(tmp_path):
    from app.config.build import build_config
    from app.ui import handlers as h

    form = h.form_defaults(None)
    assert form["reference_match"] == "auto" and form["judge_url"] is None and form["w_json"] == 0.0
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "object"}')
    edited = {**form, "dataset": "arith", "reference_match": "overlap", "json_schema": str(schema),
              "regex": r"^\d+$", "regex_forbid": "(?i)sorry", "judge_url": "http://127.0.0.1:8080/v1",
              "judge_model": "qwen", "w_judge": 1.5}
    edited.update(h.opt_in_sliders(edited))  # the page moves the json and regex sliders as their settings say
    assert (edited["w_json"], edited["w_regex"], edited["w_judge"]) == (1.0, 1.0, 1.5)
    _, flags, sets, argv = h.form_to_cli(edited, tmp_path)
    assert argv[argv.index("--reference-match") + 1] == "overlap"
    assert argv[argv.index("--judge-url") + 1] == "http://127.0.0.1:8080/v1" and "--judge-model" in argv
    assert f"reward.json_schema={schema}" in sets and r"reward.regex=^\d+$" in sets
    assert "reward.weights.judge=1.5" in sets
    cfg = build_config({}, flags, sets)  # the command the form runs builds this config
    r = cfg.reward
    assert (r.reference_match, r.json_schema, r.regex, r.regex_forbid) == ("overlap", str(schema), r"^\d+$",
                                                                           "(?i)sorry")
    assert r.judge.url == "http://127.0.0.1:8080/v1" and r.judge.model == "qwen" and r.weight("judge") == 1.5
    assert [c for c, w in r.effective_weights().items() if w] == ["length", "format", "reference", "boilerplate",
                                                                   "json", "regex", "judge"]
    _, _, sets, argv = h.form_to_cli({**form, "w_json": 1.0}, tmp_path)  # the slider alone switches json on
    assert "reward.weights.json=1.0" in sets and "--judge-url" not in argv


def test_the_form_moves_an_opt_in_slider_when_its_setting_switches_it():
    """A pattern typed switches the regex component on: its slider shows the weight it will train with (and the
    command does not pass it); a slider moved to 0 then passes 0; a judge URL does the same for the judge."""
    from app.ui import handlers as h

    form = h.widget_values(h.form_defaults("demo-grpo"))
    assert form["w_regex"] == 0.0 and form["w_judge"] == 0.0
    assert h.opt_in_sliders({**form, "regex_forbid": "(?i)sorry"}) == {"w_regex": 1.0}
    assert h.opt_in_sliders({**form, "judge_url": "http://127.0.0.1:8080/v1"}) == {"w_judge": 2.0}
    assert h.opt_in_sliders({**form, "w_regex": 1.0}) == {"w_regex": 0.0}  # the pattern cleared: back to 0
    assert h.opt_in_sliders({**form, "regex": "x", "w_regex": 3.0}) == {}  # a moved slider keeps its value
    sets = h.form_to_cli({**form, "regex_forbid": "x", "w_regex": 1.0}, "runs")[2]
    assert sets == ["reward.regex_forbid=x"]
    assert "reward.weights.regex=0.0" in h.form_to_cli({**form, "regex_forbid": "x", "w_regex": 0.0}, "runs")[2]


# ------------------------------------------------------------------------------ the probe and a failing judge


@pytest.mark.parametrize("mode,said", [
    ("refuse", "more than the model's 256-token context); serve the judge with a longer context"),
    ("unknown_model", "set reward.judge.model to a model the server lists"),
    ("garbage", "no 0-10 score in the reply 'I like it a lot!'); use a judge model that follows the rubric"),
    ("hang", "no reply within 0.5 s); start the judge, or raise reward.judge.timeout_s (now 0.5)"),
])
def test_a_judge_is_asked_once_before_training_and_a_failure_is_one_line(judge_server, mode, said):
    from app.rewards.judge.reward import probe_judge

    _Judge.mode = mode
    cfg = JudgeConfig(url=judge_server, model="mistral-x" if mode == "unknown_model" else None, timeout_s=0.5,
                      retries=2)
    with pytest.raises(UserError) as e:
        probe_judge(cfg, "What is 2 + 3?", "5", "5")
    assert said in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert len(_Judge.seen) == 1  # asked once: the probe does not retry, a refusal is not retried
    _Judge.mode = "good"
    assert probe_judge(JudgeConfig(url=judge_server), "What is 2 + 3?", "5", "5").startswith(
        "judge: answered a training row's judgement in ")


def test_a_judge_that_is_down_is_refused_before_the_model_loads():
    from app.rewards.judge.reward import probe_judge

    with pytest.raises(UserError, match=r"Connection.*start the judge server, or fix reward.judge.url"):
        probe_judge(JudgeConfig(url="http://127.0.0.1:9/v1", timeout_s=2), "p", "a", None)


def test_a_refused_request_is_not_retried_during_training(judge_server):
    _Judge.mode = "refuse"
    j = _judge(judge_server, retries=3)
    assert j(["one"], prompts=["p"]) == [None] and len(_Judge.seen) == 1
    assert "256-token context" in j.stats.summary()["judge"]["first_error"]


@pytest.mark.parametrize("dry", [False, True])
def test_train_with_a_judge_that_refuses_is_exit_2_with_nothing_made(judge_server, tmp_path, dry):
    _Judge.mode = "refuse"
    r = cli_here("train", "--dataset", "arith", "--model", "arith-base", "--judge-url", judge_server,
            "--output-dir", str(tmp_path / "runs"), *(["--dry-run"] if dry else []))
    assert r.returncode == 2, r.stdout[-800:] + r.stderr[-2000:]
    assert "failed a first judgement of a training row" in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
    if not dry:
        assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_judge_that_fails_while_training_is_said_live_in_the_summary_and_in_runs_show(judge_server, tmp_path):
    """The judge answers the probe, then refuses every judgement: the run says so as soon as it has judged 16, the
    summary and `runs show` say it with the first failure, `runs list` has it in its notes."""
    _Judge.mode, _Judge.ok_left = "refuse", 1
    out = tmp_path / "runs"
    r = cli("train", "--preset", "demo-grpo", "--judge-url", judge_server, "--max-steps", "4", "--output-dir",
            str(out), "--no-progress", "--set", "run_name=judged", "--set", "logging_steps=5",
            "--set", "training.eval_every=0", "--set", "training.proof_rows=0",
            "--set", "per_device_train_batch_size=8", "--set", "num_generations=4")
    assert r.returncode == 0, r.stderr[-3000:]
    said = r.stdout + r.stderr
    assert "the judge failed" in said and "judgements" in said, said[-3000:]
    assert "256-token context" in said  # the first failure, in the summary
    from app.run import layout, store

    st = store.read_status(out / "judged")
    assert [d["kind"] for d in st[layout.DIAGNOSIS]] == ["judge_failing"]
    assert st[layout.JUDGE_COUNTS]["judge"]["failures"] == st[layout.JUDGE_COUNTS]["judge"]["calls"] >= 16
    shown = cli("runs", "show", str(out / "judged"))
    assert "the judge failed" in shown.stdout and "256-token context" in shown.stdout
    listed = cli("runs", "list", str(out), "--json")
    assert json.loads(listed.stdout)["notes"] == "judge_failing"
