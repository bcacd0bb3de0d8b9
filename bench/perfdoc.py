"""docs/performance.md is written section by section: each bench script owns one `## name` section and replaces
only that one (the others, and hand-written sections, stay as they are)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def write_section(name: str, body: str) -> Path:
    text = DOC.read_text() if DOC.exists() else "# Performance\n\nRatios measured by the scripts in bench/.\n"
    section = f"## {name}\n\n{body.strip()}\n\n"
    pattern = re.compile(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text.rstrip("\n") + "\n")
    return DOC


def mean_sd(xs, pct: bool = False, digits: int = 0) -> str:
    """"m ± sd" of the figures that are there ("-" when none): shares as signed points with ``pct``."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    m, sd = statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{100 * m:+.1f} ± {100 * sd:.1f}" if pct else f"{m:.{digits}f} ± {sd:.{digits}f}"
