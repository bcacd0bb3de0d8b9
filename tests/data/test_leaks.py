"""app/data/leaks.py: held-out rows that repeat training rows, found exactly once normalised or nearly, and left out
of every held-out figure by build_splits."""

import json

import pytest

from app.data.leaks import NEAR, find_leaks, jaccard, normalise, shingles

PROBLEM = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
           "clips did Natalia sell altogether in April and May?")


def test_what_a_copy_changes_is_set_aside():
    assert normalise("It costs $1,000.50 —  really?  YES.") == normalise("it costs 1000.5 really yes")
    assert normalise("Pi is 3.140, not 3.") == "pi is 3.14 not 3"
    assert normalise("Ｆｕｌｌｗｉｄｔｈ") == "fullwidth"  # NFKC
    assert normalise("a.b") == "a b" and normalise("3.5") == "3.5"  # a decimal point between digits stays


def test_exact_and_near_copies_are_found_and_different_rows_are_not():
    train = [PROBLEM, "What is 2 + 2?", "Tom has 5 apples and eats 2. How many are left?"]
    held = ["NATALIA sold clips to 48 of her friends in April,and then she sold half as many clips in May. How "
            "many clips did Natalia sell altogether in April and May?",  # case and spacing
            PROBLEM.replace("48", "50"),  # one number of 30 words: near
            "Sara reads 12 pages a day for a week. How many pages does she read?"]  # a different problem
    leaks = find_leaks(train, held)
    assert leaks.exact == [0] and leaks.near == [1] and leaks.leaked == [0, 1] and abs(leaks.share - 2 / 3) < 1e-9
    assert jaccard(shingles(normalise(PROBLEM)), shingles(normalise(held[1]))) >= NEAR
    assert leaks.examples[0] == (held[0], PROBLEM)
    line = leaks.line()
    assert line.startswith("2 of 3 held-out rows repeat a training row (1 the same text") and "1 nearly" in line
    assert find_leaks(train, ["Sara reads 12 pages a day."]).line() is None
    assert find_leaks([], held).leaked == []


def _leaky(tmp_path):
    """A dataset folder whose test split repeats 3 of its 40 training rows (in capitals) beside 7 rows of its own."""
    train = [{"question": f"Ann has {i} apples and buys {i + 3} more at the market today. How many apples does Ann "
                          "have now?", "answer": str(2 * i + 3)} for i in range(40)]
    test = [{"question": r["question"].upper(), "answer": r["answer"]} for r in train[:3]]  # exact once normalised
    test += [{"question": f"Bo walks {i} km on Monday and {i + 1} km on Tuesday. How far does Bo walk in all?",
              "answer": str(2 * i + 1)} for i in range(7)]
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    return folder


def test_build_splits_leaves_leaked_rows_out_and_a_setting_refuses_them(tmp_path):
    """The held-out split is the clean rows, the detection says how many it left out; data.max_leak refuses above
    it."""
    from app.config.build import build_config
    from app.data import build_splits
    from app.errors import UserError

    folder = _leaky(tmp_path)
    cfg = build_config(sets=[f"data.dataset={folder}"])
    rows, held, det = build_splits(cfg.data, 0, local_only=True)
    assert len(held) == 7 and all(q.startswith("Bo walks") for q in held["question"])
    assert det.leaks["leaked"] == 3 and det.leaks["heldout"] == 10 and "3 of 10 held-out rows" in det.reasons["leaks"]
    with pytest.raises(UserError, match="3 of 10 held-out rows .* data.max_leak=0.1"):
        build_splits(build_config(sets=[f"data.dataset={folder}", "data.max_leak=0.1"]).data, 0, local_only=True)
    build_splits(build_config(sets=[f"data.dataset={folder}", "data.max_leak=0.5"]).data, 0, local_only=True)


def test_inspect_the_dry_run_the_proof_and_the_card_say_the_leak(tmp_path):
    from conftest import cli_here

    from app.eval.render import leak_line
    from app.export.card import proof_table

    folder = _leaky(tmp_path)
    r = cli_here("inspect", folder, "--local-only")
    assert r.returncode == 0 and "held-out: 3 of 10 held-out rows repeat a training row" in " ".join(r.stdout.split())
    r = cli_here("inspect", folder, "--local-only", "--json")
    assert json.loads(r.stdout)["leaks"]["leaked"] == 3
    r = cli_here("train", "--dataset", folder, "--model", "arith-base", "--dry-run", "--local-only", cwd=tmp_path)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0 and "3 of 10 held-out rows repeat a training row" in said
    r = cli_here("train", "--dataset", folder, "--model", "arith-base", "--dry-run", "--local-only", "--set",
                 "data.max_leak=0.2", cwd=tmp_path)
    assert r.returncode == 2 and "more than data.max_leak=0.2" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    clean = cli_here("inspect", "arith", "--local-only")
    assert "none of the 200 held-out rows repeats a training row" in " ".join(clean.stdout.split())  # its test split
    config = {"leaks": {"heldout": 10, "leaked": 3, "share": 0.3, "near_threshold": NEAR, "exact": 3, "near": 0}}
    assert leak_line(config).startswith("3 of the 10 held-out rows repeat a training row")
    table = " ".join(proof_table({"summary": {"n": 7, "base": {}, "adapter": {}, "wins": 0, "ties": 7, "losses": 0},
                                  "config": config}))
    assert "3 of the 10 held-out rows repeat a training row" in table and leak_line({}) is None


def test_a_row_with_pictures_leaks_only_with_the_same_text_and_the_same_pictures():
    from app.data.leaks import with_pictures

    red, blue = {"bytes": b"\x89PNG red", "path": "a.png"}, {"bytes": b"\x89PNG blue", "path": "a.png"}
    train = [with_pictures("What color is the picture?", [red])]
    held = [with_pictures("what color is the picture", [dict(red, path="b.png")]),  # the same picture, renamed
            with_pictures("What color is the picture?", [blue])]  # the same question about another picture
    leaks = find_leaks(train, held, near=False)
    assert leaks.exact == [0] and leaks.near == [] and leaks.leaked == [0]
    by_path = [with_pictures("q", [{"bytes": None, "path": name}]) for name in ("x.png", "y.png")]
    assert by_path[0] != by_path[1]  # pictures not read into bytes: their paths tell them apart
