"""An off-policy run's written teacher answers: kept a line at a time, read back after a kill (a torn last line
skipped), not read for another teacher or settings, and copied into a later run of the same teacher."""

from app.teacher.answers import FILE, Answers, prompt_key
from app.teacher.client import Scored

FP = {"teacher": "/models/t.gguf", "top_k": 4, "max_tokens": 40, "system_prompt": None}


def _scored(n):
    return Scored([n, n + 1], [-0.5, -0.25], [[n, 9], [n + 1]], [[-0.5, -1.5], [-0.25]], "stop")


def test_answers_survive_a_torn_last_line(tmp_path):
    path = tmp_path / "run" / FILE
    path.parent.mkdir()
    a = Answers(path, FP)
    a.add(prompt_key([1, 2, 3]), _scored(3))
    a.add(prompt_key([4, 5]), _scored(7))
    with open(path, "a") as f:
        f.write('{"key": "abc", "ids": [1, 2')  # killed mid-write
    again = Answers(path, FP)
    assert set(again.known) == {prompt_key([1, 2, 3]), prompt_key([4, 5])}
    assert again.get(prompt_key([4, 5])) == _scored(7)
    assert again.get(prompt_key([4, 5, 6])) is None


def test_another_teacher_or_setting_is_not_read_and_its_file_is_replaced(tmp_path):
    path = tmp_path / FILE
    Answers(path, FP).add(prompt_key([1]), _scored(1))
    other = Answers(path, {**FP, "top_k": 8})
    assert other.known == {} and not path.exists()
    other.add(prompt_key([2]), _scored(2))
    assert set(Answers(path, {**FP, "top_k": 8}).known) == {prompt_key([2])}
    assert Answers(path, FP).known == {}


def test_a_later_run_of_the_same_teacher_starts_from_an_earlier_runs_answers(tmp_path):
    first = tmp_path / "run-1" / FILE
    first.parent.mkdir()
    Answers(first, FP).add(prompt_key([1]), _scored(1))
    Answers(first, FP).add(prompt_key([2]), _scored(2))
    (tmp_path / "run-0").mkdir()
    Answers(tmp_path / "run-0" / FILE, {**FP, "teacher": "other.gguf"}).add(prompt_key([3]), _scored(3))
    later = tmp_path / "run-2" / FILE
    later.parent.mkdir()
    a = Answers(later, FP)
    a.add(prompt_key([2]), _scored(2))
    assert a.reuse(tmp_path) == 1 and a.reused == 1  # the one it lacked, not the other teacher's
    assert set(Answers(later, FP).known) == {prompt_key([1]), prompt_key([2])}
