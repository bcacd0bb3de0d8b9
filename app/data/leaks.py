"""Held-out rows that repeat training rows (a leak): a proof on them measures memory, not learning.

A held-out prompt leaks when a training prompt is the same text after normalising what a copy, a scrape or a merge
changes (Unicode form, case, spacing, punctuation, how a number is written: "1,000" and "1000", "3.50" and "3.5"),
or nearly the same: the Jaccard similarity of their word 3-gram sets at least ``NEAR`` (the near-duplicate measure
of web-scale dedup: Broder 1997's resemblance, estimated with MinHash and found with locality-sensitive hashing, as
datasketch's MinHashLSH does; candidates are confirmed on the exact Jaccard, so a hash collision never counts).
``NEAR`` = 0.8: two GSM8K-style problems that differ in one number of forty words share ~0.9 of their 3-grams; two
different problems of one template share under 0.5.

build_splits (app/data/splits.py) leaves the leaked rows out of the held-out split, so the proof, the held-out points
and compare are computed on clean rows, and says how many it left out (Detection.leaks); data.max_leak makes a leak
above a share a refusal. Measured speed: docs/performance.md ("leak check")."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field

NEAR = 0.8  # word 3-gram Jaccard at or above which two prompts are near duplicates
SHINGLE = 3  # words per shingle
PERMUTATIONS = 64  # MinHash permutations
# The index's own threshold, below NEAR: with 64 permutations datasketch bands them 14 x 4, so a pair at NEAR is a
# candidate with probability 0.999 (at its own threshold, 0.8, only 0.36); each candidate is then confirmed on the
# exact Jaccard, so the lower threshold costs checks, never false leaks.
CANDIDATES = 0.5
EXAMPLES = 2  # leaked rows a report quotes

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_DECIMAL_ZEROS = re.compile(r"(\d+\.\d*?)0+\b")
_NOT_WORD = re.compile(r"[^\w.]+|(?<!\d)\.|\.(?!\d)")


def normalise(text: str) -> str:
    """The text as a copy would still match it: NFKC, case folded, numbers written one way, punctuation and spacing
    gone (a decimal point between digits stays)."""
    t = unicodedata.normalize("NFKC", text or "").casefold()
    t = _THOUSANDS.sub("", t)
    t = _DECIMAL_ZEROS.sub(lambda m: m.group(1).rstrip("."), t)
    return " ".join(_NOT_WORD.sub(" ", t).split())


def shingles(normal: str) -> set[str]:
    """A normalised text's word SHINGLE-grams (a shorter text: itself, whole)."""
    words = normal.split()
    if len(words) <= SHINGLE:
        return {normal} if normal else set()
    return {" ".join(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


@dataclass
class Leaks:
    """Of ``heldout`` held-out rows, those whose prompt repeats a training prompt: ``exact`` (after normalising) and
    ``near`` (3-gram Jaccard >= NEAR), as held-out row indices; ``examples``: (held-out prompt, training prompt)."""

    heldout: int
    exact: list[int] = field(default_factory=list)
    near: list[int] = field(default_factory=list)
    examples: list[tuple[str, str]] = field(default_factory=list)

    @property
    def leaked(self) -> list[int]:
        return sorted({*self.exact, *self.near})

    @property
    def share(self) -> float:
        return len(self.leaked) / self.heldout if self.heldout else 0.0

    def line(self) -> str | None:
        """One line for inspect, the dry run and the run's log; None without a leak."""
        if not self.leaked:
            return None
        eg = "; e.g. " + " / ".join(f"{_short(h)!r} ~ {_short(t)!r}" for h, t in self.examples) if self.examples else ""
        return (f"{len(self.leaked)} of {self.heldout} held-out rows repeat a training row ({len(self.exact)} the "
                f"same text once case, spacing, punctuation and numbers are set aside, {len(self.near)} nearly: word "
                f"3-grams {NEAR:.0%} alike): left out of the proof and the held-out points{eg}")

    def to_dict(self) -> dict:
        d = asdict(self)
        return {**d, "leaked": len(self.leaked), "share": round(self.share, 4), "near_threshold": NEAR}


def with_pictures(text: str, pictures) -> str:
    """A row's text keyed by its pictures too (their stored bytes, else their paths: a digest each), so the same
    question about another picture is another row."""
    import hashlib

    digests = []
    for p in pictures or ():
        if isinstance(p, dict):  # stored as {bytes, path}: the bytes, else the path
            raw = p.get("bytes") or str(p.get("path") or "").encode()
        else:
            raw = str(p).encode()
        digests.append(hashlib.sha256(raw).hexdigest()[:16])
    return f"{text} {' '.join(digests)}" if digests else text


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "..."


def find_leaks(train: list[str], heldout: list[str], near: bool = True) -> Leaks:
    """The held-out prompts that repeat a training prompt, exactly once normalised or, with ``near``, nearly (see the
    module). Rows with pictures are compared by their text and their pictures' digests (``with_pictures``), exactly
    only: one question asked of many pictures is many rows."""
    from datasketch import MinHash, MinHashLSH  # the field's near-duplicate index (MIT)

    out = Leaks(len(heldout))
    train_norm = [normalise(t) for t in train]
    exact = {}
    for i, t in enumerate(train_norm):
        exact.setdefault(t, i)
    held_norm = [normalise(h) for h in heldout]
    pending = []
    for j, h in enumerate(held_norm):
        if h and h in exact:
            out.exact.append(j)
            out.examples += [(heldout[j], train[exact[h]])] if len(out.examples) < EXAMPLES else []
        elif h:
            pending.append(j)
    if not near or not pending or not train:
        return out
    train_sets = [shingles(t) for t in train_norm]
    lsh = MinHashLSH(threshold=CANDIDATES, num_perm=PERMUTATIONS)
    hashes = MinHash.bulk([[s.encode() for s in sets] for sets in train_sets], num_perm=PERMUTATIONS)
    with lsh.insertion_session() as session:
        for i, mh in enumerate(hashes):
            if train_sets[i]:
                session.insert(i, mh, check_duplication=False)
    held_sets = {j: shingles(held_norm[j]) for j in pending}
    for j, mh in zip(pending, MinHash.bulk([[s.encode() for s in held_sets[j]] for j in pending],
                                          num_perm=PERMUTATIONS)):
        best = max(lsh.query(mh), key=lambda i: jaccard(held_sets[j], train_sets[i]), default=None)
        if best is not None and jaccard(held_sets[j], train_sets[best]) >= NEAR:
            out.near.append(j)
            out.examples += [(heldout[j], train[best])] if len(out.examples) < EXAMPLES else []
    return out
