"""The plan's image decisions: a run whose data has images trains the vision-language model whole (its
image-text-to-text class) and must be a model that reads images; what it costs (the vision side's weights in 16-bit,
the image tokens each row adds); what TRL needs of such a run (no packing: TRL refuses to pack image rows).

Owns ``plan_images`` (called by app/train/planning/plan.make_plan) and the ``Vision`` facts the memory estimate and the
trainer builders read. Must not load weights: the vision side is measured on the model built on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.config.methods import method_of, with_
from app.data.images import stored_bytes, stored_sizes, undecoded
from app.errors import UserError
from app.model.vision import reads_images, tower_params, vision_paths

ASSUMED_TOKENS = 256  # per image, when neither the processor nor the model's files say (a 448x448 image at 28 px)


@dataclass(frozen=True)
class Vision:
    """What the plan knows of a run on images."""

    column: str  # the data's image column
    per_row: tuple[int, int]  # the fewest and most images a row has
    tokens_per_image: int
    tokens_from: str  # where that number came from
    tower_params: int | None  # the vision side's parameters (16-bit); None: not measured (files not on disk)
    kept_16bit: tuple[str, ...] = ()  # its module paths
    host: str = ""  # what the pictures take in host RAM
    processor: object = field(default=None, compare=False, repr=False)  # as the plan loaded it: the load reuses it

    def record(self) -> dict:
        """What status.json keeps (the card reads it)."""
        return {"column": self.column, "per_row": list(self.per_row), "tokens_per_image": self.tokens_per_image,
                "tower_params": self.tower_params, "kept_16bit": list(self.kept_16bit), "host_memory": self.host}

    def line(self) -> str:
        lo, hi = self.per_row
        rows = f"{lo}" if lo == hi else f"{lo}-{hi}"
        tower = (f"the vision side ({', '.join(self.kept_16bit)}: {self.tower_params / 1e6:.2f}M params) stays "
                 "16-bit and frozen" if self.tower_params is not None else "the vision side stays 16-bit and frozen")
        return (f"images: column '{self.column}', {rows} per row, {self.tokens_per_image} tokens each "
                f"({self.tokens_from}); {tower}; LoRA on the language model's linear layers; rows are never cut "
                "(an image's tokens stay whole: a row longer than the context is refused)"
                + (f"; {self.host}" if self.host else ""))


def plan_images(cfg, det, rows, say, offline: bool, files) -> tuple[Vision | None, dict]:
    """(Vision or None, config changes) for a run on ``det``'s data; ``files``: the model's, as the plan read them
    (app.model.files.ModelFiles). Raises UserError for a method that cannot train on images yet or a model that
    reads none."""
    if det is None or not det.image_field:
        return None, {}
    mc = cfg.model
    if mc.images is False:
        raise UserError(f"the dataset has images (column '{det.image_field}') and model.images is false; unset it "
                        "(--set model.images=) to train on them, or use a dataset without images")
    method = method_of(cfg)
    if not method.pictures:
        raise UserError(f"the dataset has images (column '{det.image_field}') and --method {cfg.method} does not "
                        f"train on images yet; use --method {' or '.join(with_('pictures'))}, or a dataset without "
                        "images")
    if cfg.tools.enabled:
        # the tool loop of training, compare and chat reads text only (app/ask/asking.py): a run on pictures with
        # tools would be proved without its tools and chatted without its pictures
        raise UserError(f"the dataset has images (column '{det.image_field}') and tools are on: a run on pictures "
                        "cannot call tools yet; drop the tools (--set tools.use=[] --set tools.environment=) or use a "
                        "dataset without images")
    config = files.config
    if config is not None and not reads_images(config):
        raise UserError(f"the dataset has images (column '{det.image_field}') but model '{mc.name_or_path}' reads "
                        "none (its config has no vision tower); pick a vision-language model (Gemma 3, Qwen2.5-VL, "
                        "SmolVLM, ...) or a dataset without images")
    per_row = tuple(det.images_per_row or (1, 1))
    tower, paths = None, ()
    processor = None
    if config is not None:
        shell = files.shell(images=True)
        tower, paths = tower_params(shell), tuple(vision_paths(shell))
        try:
            processor = files.processor(local_only=True)
        except (OSError, ValueError, ImportError) as e:  # a family whose processor needs torchvision, say
            if not offline:
                raise UserError(f"the processor of '{mc.name_or_path}' cannot be loaded here ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:160]}); install what it names, or pick another "
                                "vision-language model") from None
    sizes = _sizes(rows)
    tokens, source = image_tokens(processor, config, sizes)
    vision = Vision(det.image_field, per_row, tokens, source, tower, paths,
                    host_memory(rows, sizes, per_row[1] * cfg.training.per_device_train_batch_size), processor)
    say(vision.line())
    changes = {} if mc.images else {"model.images": True}
    if method.trains_whole_examples and cfg.training.packing is not False:
        say("packing is off: TRL trains each image row in its own padded row (packing would cut image tokens apart)")
        changes["training.packing"] = False
    return vision, changes


def host_memory(rows, sizes: list[tuple[int, int]], at_once: int) -> str:
    """The pictures in host RAM: as stored (bytes, for the whole run), and decoded ``at_once`` (a batch's pictures,
    at the largest size sampled), which is all that is ever decoded together."""
    count, stored = stored_bytes(rows)
    if not count:
        return ""
    h, w = max(sizes, key=lambda s: s[0] * s[1]) if sizes else (0, 0)
    one = h * w * 3  # RGB, a byte a channel
    largest = f" (the largest sampled, {w}x{h}, is {one / 1e6:,.1f} MB decoded; {min(at_once, count)} at a time: up " \
              f"to {min(at_once, count) * one / 1e6:,.0f} MB)" if one else ""
    return (f"{count} training picture(s), {stored / 1e6:,.1f} MB as stored, held as stored and decoded a batch at a "
            f"time{largest}")


def image_tokens(processor, config: dict | None, sizes: list[tuple[int, int]]) -> tuple[int, str]:
    """(tokens one image takes in the prompt, where the number came from): the processor asked about the largest
    image of the first rows (a processor that tiles or resizes by pixels says its own count), else the model's
    files, else ASSUMED_TOKENS."""
    if processor is not None and sizes and hasattr(processor, "_get_num_multimodal_tokens"):
        try:
            counted = processor._get_num_multimodal_tokens(image_sizes=[max(sizes)]).num_image_tokens
            if counted:
                return int(counted[0]), f"the processor, for a {max(sizes)[1]}x{max(sizes)[0]} image"
        except Exception:  # noqa: BLE001 - a processor without the count: the files below
            pass
    for key in ("mm_tokens_per_image", "image_seq_length", "image_seq_len"):
        if config and isinstance(config.get(key), int):
            return config[key], f"config.json {key}"
    return ASSUMED_TOKENS, "assumed: neither the processor nor config.json says"


def _sizes(rows, n: int = 32) -> list[tuple[int, int]]:
    """(height, width) of the images of the first ``n`` rows."""
    if rows is None or "images" not in getattr(rows, "column_names", ()):
        return []
    out = []
    for cells in undecoded(rows.select(range(min(n, len(rows)))))["images"]:
        out += stored_sizes(cells)  # from the files' headers: no picture decoded to learn its size
    return out


def row_image_tokens(vision: Vision | None, row: dict) -> int:
    """The image tokens one row adds to its length."""
    if vision is None:
        return 0
    return len(row.get("images") or []) * vision.tokens_per_image


def check_image_rows(vision: Vision | None, lengths: list[int] | None, context: int | None) -> None:
    """A run on images never cuts a row (an image's tokens must stay whole): a row longer than the model's context
    is one line, with what takes the room."""
    if vision is None or not lengths or context is None or max(lengths) <= context:
        return
    longest = max(lengths)
    most = vision.per_row[1] * vision.tokens_per_image
    raise UserError(f"a row takes {longest} tokens ({vision.per_row[1]} image(s) of {vision.tokens_per_image} tokens: "
                    f"{most}), more than the model's {context}-token context, and rows with images are never cut; "
                    "use fewer or smaller images per row (the processor's max pixels), or a model with a longer "
                    "context")
