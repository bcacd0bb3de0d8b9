"""The run view's text (app/ui/run_view.py): the lines after a diagnosis note stay lines of their own, code reads as
code inside the note, and the Runs table's notes say a run's failed calls and what its diagnosis found."""


def test_lines_after_a_diagnosis_note_are_not_swallowed_by_it(tmp_path):
    import markdown_it

    from app.ui.run_view import status_markdown

    s = {"name": "r", "status": "finished", "diagnosis": ["check it with `qlora-app score`"],
         "heldout": "accuracy 20% -> 40%", "comparison": "base 20% -> adapter 40%", "adapter": "/x/adapter"}
    page = status_markdown(s)
    rendered = markdown_it.MarkdownIt("commonmark", {"html": True}).render(page)
    assert "<code>qlora-app score</code>" in rendered and "`" not in rendered
    after = rendered.split("</div>", 1)[1]
    assert "held-out during training: accuracy 20% -&gt; 40%" in after  # its own line, out of the note's block
    assert "<br />" in after or "<p>" in after


def test_the_runs_tables_notes_have_the_calls_and_the_diagnosis(tmp_path):
    from app.run import layout, store
    from app.ui.run_view import RUN_COLUMNS, runs_rows

    d = tmp_path / "judged"
    d.mkdir()
    (d / layout.CONFIG).write_text("method: grpo\nmodel: {name_or_path: tiny}\ndata: {dataset: arith}\n")
    store.write_status(d, layout.FINISHED, step=4, **{
        layout.JUDGE_COUNTS: {"judge": {"calls": 56, "failures": 56, "timeouts": 0, "mean_latency_ms": 3.0}},
        layout.DIAGNOSIS: [{"kind": "judge_failing", "step": 2, "message": "the judge failed", "numbers": {}}]})
    (row,) = runs_rows(tmp_path)
    shown = dict(zip(RUN_COLUMNS, row))
    assert shown["notes"] == "judge 56 calls, 56 failed · judge_failing"
