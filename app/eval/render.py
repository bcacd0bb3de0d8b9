"""Every way a ``Comparison`` is shown: the rich terminal table (``print_result``), the --html page
(``page_html``), and the UI's summary and side-by-side rows (``summary_markdown``, ``rows_html``).

The page is one self-contained file (inline CSS, no scripts, no external assets) so it can be mailed or opened
offline. Summary on top, then each prompt with base and adapter side by side and the words where they differ
highlighted. Every piece of model or dataset text goes through ``html.escape``: model output is untrusted and may
contain markup."""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict
from html import escape

from app.eval.result import REWARD_TOLERANCE, SIDES, Comparison, Summary
from app.run.summary import chosen_line, dataset_lines, preference_text
from app.run.summary import lift_lines as proof_lift_lines
from app.tools.loop import call_lines

PAGE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#f7f8fa}
h1{font-size:20px;margin:0 0 4px} .meta{color:#5b6475;font-size:13px;margin-bottom:16px}
"""
# The rows and the summary table: the same classes on the page and in the UI's Compare tab.
CSS = """
table.summary{border-collapse:collapse;background:#fff;margin-bottom:8px}
.summary th,.summary td{border:1px solid #dde1e8;padding:4px 10px;text-align:right;font-size:14px}
.summary th:first-child,.summary td:first-child{text-align:left}
.wtl{margin:8px 0 20px;font-size:15px} .win{color:#137333} .loss{color:#b3261e} .tie{color:#5b6475}
.row{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:0 0 14px;padding:10px 12px}
.row.w{border-left:5px solid #34a853} .row.l{border-left:5px solid #ea4335} .row.t{border-left:5px solid #bbb}
.pic{max-height:96px;margin:0 8px 4px 0;image-rendering:pixelated;border:1px solid #d0d5dd}
.prompt,.ref{white-space:pre-wrap;font-size:14px;margin:2px 0} .ref{color:#5b6475}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin-top:8px}
.cols.three{grid-template-columns:1fr 1fr 1fr}
.side{border:1px solid #e6e9ef;border-radius:4px;padding:6px 8px;background:#fcfcfd}
.side h3{font-size:13px;margin:0 0 4px;color:#5b6475;font-weight:600}
.out{white-space:pre-wrap;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
.calls{font-family:monospace;font-size:12px;color:#1f5f8b;margin-bottom:4px;white-space:pre-wrap}
.onlybase{background:#fde2e1;text-decoration:line-through;text-decoration-color:#b3261e55}
.onlyadapter{background:#d9f2e0}
.ok{color:#137333;font-weight:600} .bad{color:#b3261e;font-weight:600} .na{color:#8a93a3}
.same{font-size:12px;color:#8a93a3;margin-left:6px}
"""

# A word with its trailing whitespace: spaces alone never count as "equal", so a highlight is not chopped into
# one span per word when whole stretches differ.
_TOKEN = re.compile(r"\S+\s*|\s+")


def reward_text(value: float) -> str:
    """A reward as compare shows it, to 3 places; a reward that rounds to zero is 0.000, never -0.000."""
    text = f"{value:.3f}"
    return "0.000" if text == "-0.000" else text


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def diff_spans(base: str, adapter: str) -> tuple[str, str]:
    """Escaped HTML for both texts with the words found only on one side wrapped in a highlight span."""
    a, b = _tokens(base), _tokens(adapter)
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    left, right = [], []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        lhs, rhs = escape("".join(a[i1:i2])), escape("".join(b[j1:j2]))
        if op == "equal":
            left.append(lhs)
            right.append(rhs)
            continue
        if lhs:
            left.append(f'<span class="onlybase">{lhs}</span>')
        if rhs:
            right.append(f'<span class="onlyadapter">{rhs}</span>')
    return "".join(left), "".join(right)


def _num(v, pct: bool = False, digits: int = 3) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.1f}%" if pct else f"{v:.{digits}f}"


def summary_columns(s: Summary) -> tuple[str, ...]:
    """The summary table's columns: a distillation run's has its teacher's last."""
    return ("metric", "base", "adapter", "Δ") + (("teacher",) if s.teacher else ())


def summary_rows(s: Summary) -> list[tuple[str, ...]]:
    """(metric, base, adapter, delta[, teacher]) display strings; the terminal, the page and the UI show the same
    rows."""
    out = []
    base, ad, te = s.base, s.adapter, s.teacher

    def row(name: str, key: str, pct: bool = False, digits: int = 3, comp: str | None = None) -> None:
        b, a, t = ((getattr(x, key) if comp is None else getattr(x, key).get(comp)) if x else None
                   for x in (base, ad, te))
        d = None if a is None or b is None else a - b
        if d is None:
            delta = _num(d)
        elif pct:  # a change of a share is in percentage points, not percent
            delta = f"{100 * d:+.1f} pts"
        else:
            delta = ("+" if d > 0 else "") + _num(d, digits=digits)
        out.append((name, _num(b, pct, digits), _num(a, pct, digits), delta) + ((_num(t, pct, digits),) if te else ()))

    if base.n_judged:
        how = f"; scored by {s.correct_when}" if s.correct_when else ""
        row(f"accuracy ({base.n_judged} with reference{how})", "accuracy", pct=True)
    row("mean reward", "mean_reward")
    for comp in base.components:
        row(f"  reward/{comp}", "components", comp=comp)
    row("mean length (chars)", "mean_length", digits=1)
    row("boilerplate rate", "boilerplate_rate", pct=True)
    if base.tool_success is not None or ad.tool_success is not None:  # a tool run
        row("tool calls succeeded", "tool_success", pct=True)
        row("tool calls per answer", "tool_calls", digits=2)
    return out


def teacher_line(s: Summary) -> str | None:
    """A distillation run's: how much of the teacher's lead over the base the adapter closed, else None."""
    if s.teacher is None:
        return None
    by = "accuracy" if s.base.accuracy is not None and s.teacher.accuracy is not None else "mean reward"
    if s.closed is None:
        return f"teacher: no lead over the base in {by} on these rows, so none to close"
    return f"the adapter closed {s.closed:.0%} of the teacher's lead over the base in {by}"


def summary_title(s) -> str:
    """'summary over 12 held-out rows (your 1 prompt is shown above, not counted)': what the figures are of."""
    what = f"summary over {s.n} held-out rows" if s.heldout else f"summary over your {s.n} prompt(s)"
    if s.heldout and s.prompts:
        what += f" (your {s.prompts} prompt(s) are shown, not counted: they have no reference)"
    return what


WINS_RULE = (f"a change in correctness decides, else a reward difference over {REWARD_TOLERANCE:g}; "
             "closer is a tie")


CEILING = 0.95  # a base this accurate leaves a proof no room: said, with how "correct" was scored


def ceiling_line(s: Summary) -> str | None:
    """A note when the base already answers nearly every held-out row right (at least CEILING of 10 or more): no lift
    can show, and a matcher that counts wrong answers right reads the same way. None otherwise."""
    b = s.base
    if b.accuracy is None or b.accuracy < CEILING or b.n_judged < 10:
        return None
    how = f" (scored by {s.correct_when})" if s.correct_when else ""
    return (f"note: the base already answers {100 * b.accuracy:.0f}% of these {b.n_judged} rows right{how}: this "
            "proof has no room to show a lift; if that is too good to be true, set reward.reference_match to how "
            "answers should be compared (numeric, exact, math, overlap, json), or compare on harder rows")


def lift_lines(s: Summary) -> list[str]:
    """How sure the lift is, a line a figure: its interval and, for the accuracy, McNemar's test; a lift whose
    interval holds 0 is said as no difference shown (app/eval/uncertainty.py)."""
    return proof_lift_lines(s.lift)


def wins_line(s: Summary) -> str:
    return f"adapter vs base: {s.wins} wins, {s.ties} ties, {s.losses} losses ({WINS_RULE})"


def _summary(s: Summary) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{escape(x.strip())}</td>" for x in r) + "</tr>" for r in summary_rows(s))
    head = "".join(f"<th>{c}</th>" for c in summary_columns(s))
    closed = f"<p>{escape(teacher_line(s))}</p>" if s.teacher else ""
    closed += f"<p class='note'>{escape(ceiling_line(s))}</p>" if ceiling_line(s) else ""
    closed += "".join(f"<p class='lift'>{escape(line)}</p>" for line in lift_lines(s))
    return (f"<p>{escape(summary_title(s))}</p>"
            f'<table class="summary"><tr>{head}</tr>' + cells + "</table>" + closed
            + f'<div class="wtl">adapter vs base: <span class="win">{s.wins} wins</span>, '
              f'<span class="tie">{s.ties} ties</span>, <span class="loss">{s.losses} losses</span> ({WINS_RULE})'
              "</div>")


def summary_markdown(c: Comparison) -> str:
    """The UI's summary: the same rows as the terminal and the page, as a Markdown table."""
    cols = summary_columns(c.summary)
    lines = [f"**{summary_title(c.summary)}**", "", "| " + " | ".join(cols) + " |",
             "|---" + "|---:" * (len(cols) - 1) + "|"]
    lines += ["| " + " | ".join(x.strip() for x in r) + " |" for r in summary_rows(c.summary)]
    lines += ["", teacher_line(c.summary)] if c.summary.teacher else []
    lines += ["", ceiling_line(c.summary)] if ceiling_line(c.summary) else []
    lines += [""] + [f"- {line}" for line in lift_lines(c.summary)] if lift_lines(c.summary) else []
    pref = preference_text(c.preference)
    per = "".join(f"\n- {line}" for line in dataset_lines(asdict(c.summary)))
    return ("\n".join(lines) + f"\n\n{wins_line(c.summary)}" + (f"\n\n{pref}" if pref else "")
            + (f"\n\nper dataset:{per}" if per else "") + (f"\n\n{pictureless(c)}" if pictureless(c) else "")
            + (f"\n\n{leak_line(c.config)}" if leak_line(c.config) else "")
            + (f"\n\n{chosen_line(c.config)}" if chosen_line(c.config) else ""))


def leak_line(config: dict) -> str | None:
    """How many held-out rows the proof left out because they repeat training rows (compare.json's config), or
    None when none did."""
    leaks = config.get("leaks") or {}
    if not leaks.get("leaked"):
        return None
    return (f"{leaks['leaked']} of the {leaks['heldout']} held-out rows repeat a training row ({leaks['exact']} "
            f"exactly once normalised, {leaks['near']} nearly) and are left out of these figures")


def pictureless(c: Comparison) -> str | None:
    """The note for a run trained on pictures compared on rows without one (typed prompts), else None."""
    n = c.config.get("pictureless")
    return f"note: {n} row(s) had no picture, and this run was trained on pictures: they were answered from the " \
           "text alone" if n else None


def _verdict(correct) -> str:
    if correct is True:
        return '<span class="ok">✓</span>'
    if correct is False:
        return '<span class="bad">✗</span>'
    return '<span class="na">–</span>'


def _calls_html(cell) -> str:
    """A tool run's calls and results above the answer (escaped: arguments and results are untrusted text)."""
    lines = call_lines(cell.turns or [])
    return f'<div class="calls">{"<br>".join(escape(x) for x in lines)}</div>' if lines else ""


def _row(i: int, r) -> str:
    left, right = diff_spans(r.base.text, r.adapter.text)
    cls = {"win": "w", "loss": "l", "tie": "t"}[r.verdict]
    same = '<span class="same">(identical outputs)</span>' if r.base.text == r.adapter.text else ""
    ref = f'<div class="ref">reference: {escape(r.reference)}</div>' if r.reference is not None else ""
    shown = [("base", r.base, left), ("adapter", r.adapter, right)]
    if r.teacher is not None:  # a distillation run's proof: the teacher's answer to the same row
        shown.append(("teacher", r.teacher, escape(r.teacher.text)))
    sides = "".join(
        f'<div class="side" data-side="{name}"><h3>{name} · reward {reward_text(c.reward)} {_verdict(c.correct)}</h3>'
        f'{_calls_html(c)}<div class="out">{body}</div></div>'
        for name, c, body in shown)
    pictures = "".join(f'<img class="pic" src="{escape(u)}" alt="image {k}">'
                       for k, u in enumerate(r.images or [], 1) if u.startswith("data:image/"))
    return (f'<div class="row {cls}">{pictures}<div class="prompt"><b>#{i}</b> {escape(r.prompt)}{same}</div>{ref}'
            f'<div class="cols{" three" if r.teacher is not None else ""}">{sides}</div></div>')


def rows_html(c: Comparison) -> str:
    """Each prompt with base and adapter side by side (the UI shows this under its summary)."""
    return "".join(_row(i, r) for i, r in enumerate(c.rows, 1))


def page_html(c: Comparison) -> str:
    """The --html page: one self-contained file."""
    cfg = c.config
    meta = " · ".join(escape(f"{k}: {cfg[k]}") for k in
                      ("base_model", "adapter", "dataset", "max_new_tokens", "temperature", "seed")
                      if cfg.get(k) is not None)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>qlora-app: base vs adapter</title>"
            f"<style>{PAGE_CSS}{CSS}</style></head><body>"
            f"<h1>Base vs adapter</h1><div class=\"meta\">{meta}</div>"
            f"{_summary(c.summary)}"
            + (f"<p class='note'>{escape(leak_line(cfg))}</p>" if leak_line(cfg) else "")
            + (f"<p class='note'>{escape(chosen_line(cfg))}</p>" if chosen_line(cfg) else "")
            + f"{_preference(c)}{rows_html(c)}</body></html>\n")


def _preference(c: Comparison) -> str:
    pref = preference_text(c.preference)
    return f'<p class="pref">{escape(pref)}</p>' if pref else ""


# ---------------------------------------------------------------------------------------------- terminal


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _mark(correct) -> str:
    return {True: "✓", False: "✗"}.get(correct, "–")


def print_result(c: Comparison, console, clip: int = 300, max_rows: int | None = None) -> None:
    """Side-by-side table (model text is shown as plain Text, never parsed as rich markup), then the summary."""
    from rich.table import Table
    from rich.text import Text

    teacher = any(r.teacher is not None for r in c.rows)  # a distillation run's proof: the teacher's column too
    t = Table(title="base vs adapter" + (" (and the teacher)" if teacher else ""), show_lines=True, expand=True)
    for col, ratio in (("#", None), ("prompt", 3), ("reference", 2), ("base", 4), ("adapter", 4),
                       *((("teacher", 4),) if teacher else ())):
        t.add_column(col, ratio=ratio, overflow="fold", justify="right" if col == "#" else "left")
    for i, r in enumerate(c.rows[:max_rows], 1):
        cells = []
        for side in (*SIDES, *(("teacher",) if teacher else ())):
            cell_ = getattr(r, side)
            if cell_ is None:
                cells.append(Text("–", style="dim"))
                continue
            cell = Text("".join(line + "\n" for line in call_lines(cell_.turns or [])), style="cyan")
            cell.append(_clip(cell_.text, clip) or "(empty)", style="default")
            style = {True: "green", False: "red"}.get(cell_.correct, "dim")
            cell.append(f"\nreward {reward_text(cell_.reward)} {_mark(cell_.correct)}", style=style)
            cells.append(cell)
        t.add_row(str(i), Text(_clip(r.prompt, clip)), Text(_clip(r.reference or "–", clip)), *cells)
    console.print(t)

    s = c.summary
    st = Table(title=summary_title(s), show_header=True)
    for col in summary_columns(s):
        st.add_column(col, justify="left" if col == "metric" else "right")

    for r in summary_rows(s):
        st.add_row(*r)
    console.print(st)
    if s.teacher:
        console.print(teacher_line(s), markup=False, highlight=False)
    if ceiling_line(s):
        console.print(ceiling_line(s), style="yellow", markup=False, highlight=False)
    for line in lift_lines(s):
        console.print(line, markup=False, highlight=False)
    if leak_line(c.config):
        console.print(leak_line(c.config), style="yellow", markup=False, highlight=False)
    if chosen_line(c.config):
        console.print(chosen_line(c.config), markup=False, highlight=False)
    console.print(f"adapter vs base: [green]{s.wins} wins[/], {s.ties} ties, [red]{s.losses} losses[/] ({WINS_RULE})")
    pref = preference_text(c.preference)
    if pref:
        console.print(pref, markup=False, highlight=False)
    for line in dataset_lines(asdict(s)):  # a mix: every dataset on its own
        console.print(f"  {line}", markup=False, highlight=False)
