"""Peak memory on record: the first question of a user with an 8 GB GPU is "how close did it get?".

On CUDA: the caching allocator's peak since training began, allocated (live tensors) and reserved (what the
process holds from the driver: the figure that meets the card's limit). On CPU both fields hold the process's
peak resident set size, so the same path is exercised (and tested) without a GPU. Values in GiB, running peaks.
"""

from __future__ import annotations

import resource
import sys

from app.run.layout import PEAK_ALLOCATED as ALLOCATED
from app.run.layout import PEAK_DEVICE as DEVICE
from app.run.layout import PEAK_RESERVED as RESERVED

GIB = 2**30


def reset(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()


def peak_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB, macOS bytes


def sample(cuda: bool) -> dict:
    if cuda:
        import torch

        return {ALLOCATED: round(torch.cuda.max_memory_allocated() / GIB, 3),
                RESERVED: round(torch.cuda.max_memory_reserved() / GIB, 3), DEVICE: "cuda"}
    rss = round(peak_rss_bytes() / GIB, 3)
    return {ALLOCATED: rss, RESERVED: rss, DEVICE: "cpu (peak RSS)"}
