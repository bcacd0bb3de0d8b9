"""The ``data`` section: which dataset (or which mix of datasets) a run trains on, which of its columns are prompt /
reference / chosen / rejected, and what is held out. Re-exported by app/config/schema.py, where ``AppConfig``
holds it. How a mix is drawn is app/data/mixing.py's.

Only pydantic at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

from pydantic import PrivateAttr, model_validator

from app.config.fields import StrictModel, _d

# The keys that describe one dataset (a mix part has its own; a run on one dataset has them at the section's top).
PART_KEYS = ("config_name", "split", "eval_split", "prompt_field", "reference_field", "chosen_field",
             "rejected_field", "label_field")
SHARE_TOLERANCE = 0.01  # shares typed as 0.33,0.33,0.33 still add up to one mix


class MixPart(StrictModel):
    """One dataset of a mix: where it is, its share of the training rows, and its own fields."""

    dataset: str = _d(..., "hub id, local file or folder, or a built-in name")
    share: float | None = _d(None, "its share of the training rows (the shares add up to 1); empty on every part = "
                                   "each dataset whole (shares by size)", gt=0, le=1)
    config_name: str | None = _d(None, "hub dataset config")
    split: str = _d("train", "split to train on")
    eval_split: str | None = _d(None, "held-out split; empty = its test split if any, else a seeded slice")
    prompt_field: str | None = _d(None, "column holding the prompt; empty = auto-detect")
    reference_field: str | None = _d(None, "column holding the reference answer; empty = auto-detect")
    chosen_field: str | None = _d(None, "preference data: column of the preferred answer; empty = auto-detect")
    rejected_field: str | None = _d(None, "preference data: column of the rejected answer; empty = auto-detect")
    label_field: str | None = _d(None, "unpaired answers (KTO): column saying whether each answer is good; empty = "
                                       "auto-detect")


class DataConfig(StrictModel):
    dataset: str | None = _d(None, "hub id, local .jsonl/.json/.csv/.parquet file or folder, or a built-in name "
                                   "(arith, arith-sft, arith-calc)")
    config_name: str | None = _d(None, "hub dataset config, e.g. 'main' for openai/gsm8k")
    split: str = _d("train", "split to train on")
    eval_split: str | None = _d(None, "held-out split; empty = the dataset's test split if any, else a seeded "
                                      "slice of heldout_size rows")
    prompt_field: str | None = _d(None, "column holding the prompt; empty = auto-detect (qlora-app inspect shows why)")
    reference_field: str | None = _d(None, "column holding the reference answer; empty = auto-detect")
    chosen_field: str | None = _d(None, "preference data: column holding the preferred answer; empty = auto-detect")
    rejected_field: str | None = _d(None, "preference data: column holding the answer that lost; empty = "
                                          "auto-detect")
    label_field: str | None = _d(None, "unpaired answers (KTO): column saying whether each row's answer is good "
                                       "(true / false, yes / no, 1 / 0, 👍 / 👎); empty = auto-detect by its name")
    mix: list[MixPart] = _d([], "train on several datasets at once (instead of data.dataset): a list of {dataset, "
                                "share, and its own config_name / split / eval_split / *_field}; each is detected on "
                                "its own, drawn to its share without repeating a row (see mix_rows), and held out on "
                                "its own. CLI: --dataset A --dataset B --mix 0.7,0.3")
    mix_rows: int | None = _d(None, "a mix's training rows; empty = the most the shares allow without repeating a "
                                    "row (the larger datasets are sampled down); more than that repeats the rows of "
                                    "the datasets that run out, each as often as its share needs", gt=0)
    max_samples: int | None = _d(None, "use at most this many training rows", gt=0)
    heldout_size: int = _d(100, "rows held out when the dataset has no test split", ge=0)
    max_leak: float | None = _d(None, "refuse a run when more than this share of the held-out rows repeat training "
                                      "rows (they are left out of the proof either way); empty = never refuse",
                                ge=0.0, le=1.0)
    system_prompt: str | None = _d(None, "system prompt put before every prompt; empty = the method's default "
                                         "(GRPO asks for 'Final answer: ...')")
    # Where a key's value came from when it was not typed as its own flag ("data.eval_split from preset demo-grpo"):
    # set by app/config/build.py, not saved; messages about a value name it (said_as).
    _origin: dict[str, str] = PrivateAttr(default_factory=dict)

    def said_as(self, key: str) -> str:
        """How a message names this key's value: the flag that set it, or the preset or config it came from."""
        return self._origin.get(key) or f"--{key.replace('_', '-')}"

    @model_validator(mode="after")
    def _one_source(self):
        if not self.mix:
            if self.mix_rows is not None:
                raise ValueError("data.mix_rows is the size of a mix; set data.mix (--dataset A --dataset B --mix "
                                 "0.7,0.3) or drop it")
            return self
        if self.dataset:
            raise ValueError(f"data.dataset ('{self.dataset}') and data.mix are both set; a mix lists every dataset, "
                             "the first included: drop data.dataset")
        if len(self.mix) < 2:
            raise ValueError("data.mix needs two or more datasets; for one, set data.dataset (--dataset NAME)")
        own = [k for k in PART_KEYS if k != "split" and getattr(self, k) is not None]
        if own:
            raise ValueError(f"data.{own[0]} describes one dataset; in a mix each part has its own: set "
                             f"data.mix[N].{own[0]}")
        shares = [p.share for p in self.mix]
        if any(s is None for s in shares) and any(s is not None for s in shares):
            raise ValueError("data.mix: give every dataset a share (--mix 0.7,0.3), or none (each dataset whole)")
        if shares[0] is not None and abs(sum(shares) - 1) > SHARE_TOLERANCE:
            raise ValueError(f"data.mix shares add up to {sum(shares):g}, not 1; e.g. --mix "
                             f"{','.join(f'{s / sum(shares):.2g}' for s in shares)}")
        keys = [(p.dataset, p.config_name, p.split) for p in self.mix]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice:
            raise ValueError(f"data.mix names '{twice[0]}' twice (same config and split); list each dataset once")
        return self

    def parts(self) -> list[tuple[DataConfig, float | None]]:
        """[(a one-dataset DataConfig, its share)]: the mix's parts, each with the section's shared settings (held
        out size, system prompt); a run on one dataset is one part of share 1."""
        if not self.mix:
            return [(self, 1.0)]
        shared = {k: getattr(self, k) for k in ("heldout_size", "system_prompt")}
        out = []
        for p in self.mix:
            dc = DataConfig(dataset=p.dataset, **{k: getattr(p, k) for k in PART_KEYS}, **shared)
            dc._origin = {k: f"data.mix[{self.mix.index(p)}].{k}" for k in PART_KEYS}
            out.append((dc, p.share))
        return out

    @property
    def datasets(self) -> list[str]:
        """Every dataset the run trains on, in order (none: [])."""
        return [p.dataset for p in self.mix] if self.mix else [self.dataset] if self.dataset else []

    @property
    def label(self) -> str | None:
        """'arith' or 'arith 70% + my.jsonl 30%': the data as runs, the card and the logs name it."""
        if not self.mix:
            return self.dataset
        return " + ".join(f"{p.dataset}" + (f" {p.share:.0%}" if p.share is not None else "") for p in self.mix)
