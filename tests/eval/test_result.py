"""The comparison's typed result with a distillation run's teacher (app/eval/result.py): its side summarised beside
base and adapter, the share of its lead the adapter closed, compare.json round-tripping it, and every view's
teacher column (app/eval/render.py); a run without a teacher keeps compare.json's two-sided shape."""

import pytest

from app.eval.render import summary_columns, summary_markdown, summary_rows, teacher_line
from app.eval.result import Cell, Comparison, Row
from app.run.summary import comparison_text


def _cell(correct: bool, reward: float = 0.0) -> Cell:
    return Cell(text="x", tokens=3, reward=reward, components={"reference": float(correct)}, correct=correct)


def _rows(base, adapter, teacher):
    return [Row(prompt=f"q{i}", reference="1", source="heldout", base=_cell(b), adapter=_cell(a),
                teacher=None if t is None else _cell(t)) for i, (b, a, t) in enumerate(zip(base, adapter, teacher))]


def test_the_teacher_is_a_third_side_and_the_share_of_its_lead_closed_is_said():
    c = Comparison.of(_rows([0, 0, 0, 1], [1, 0, 0, 1], [1, 1, 1, 1]), {"teacher": "arith-teacher"})
    s = c.summary
    assert (s.base.accuracy, s.adapter.accuracy, s.teacher.accuracy) == (0.25, 0.5, 1.0)
    assert s.closed == pytest.approx(1 / 3)
    back = Comparison.from_dict(c.to_dict())
    assert back.summary.teacher == s.teacher and back.summary.closed == s.closed
    assert back.rows[0].teacher == c.rows[0].teacher
    assert summary_columns(s)[-1] == "teacher" and summary_rows(s)[0][-1] == "100.0%"
    assert teacher_line(s) == "the adapter closed 33% of the teacher's lead over the base in accuracy"
    assert "| metric | base | adapter | Δ | teacher |" in summary_markdown(c) and teacher_line(s) in summary_markdown(c)
    assert "teacher 100.0% (33% of its lead closed)" in comparison_text(c.to_dict())


def test_a_teacher_without_a_lead_closes_nothing_and_a_plain_run_keeps_two_sides():
    c = Comparison.of(_rows([1, 0], [1, 1], [0, 0]), {})
    assert c.summary.closed is None and "no lead over the base" in teacher_line(c.summary)
    plain = Comparison.of(_rows([1, 0], [1, 1], [None, None]), {}).to_dict()
    assert "teacher" not in plain["summary"] and "closed" not in plain["summary"] and "teacher" not in plain["rows"][0]
    assert summary_columns(Comparison.from_dict(plain).summary) == ("metric", "base", "adapter", "Δ")


def test_each_row_shows_the_teachers_answer_in_the_terminal_and_the_page():
    """The teacher's answer on every row of the proof, not only in the summary: a third column in the terminal's
    table, a third card on the page and the UI's Compare view (rows_html); a plain run keeps two."""
    import io

    from rich.console import Console

    from app.eval.render import page_html, print_result, rows_html

    rows = _rows([0, 1], [1, 1], [1, 1])
    rows[0].teacher.text, rows[1].teacher.text = "TEACHER-SAYS-ONE", "TEACHER-SAYS-TWO"
    c = Comparison.of(rows, {"teacher": "arith-teacher"})
    buf = io.StringIO()
    print_result(c, Console(file=buf, width=200))
    out = buf.getvalue()
    assert "teacher" in out.splitlines()[2] and "TEACHER-SAYS-ONE" in out and "TEACHER-SAYS-TWO" in out
    html = rows_html(c)
    assert html.count('data-side="teacher"') == 2 and "TEACHER-SAYS-TWO" in html and 'class="cols three"' in html
    assert "TEACHER-SAYS-ONE" in page_html(c)
    plain = Comparison.of(_rows([0], [1], [None]), {})
    assert 'data-side="teacher"' not in rows_html(plain)
