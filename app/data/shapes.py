"""``shapes``: the built-in offline image dataset: one coloured shape drawn with PIL on a plain background, and the
question "What color is the <shape>?" (``question``, ``answer`` the colour word, ``image``).

Why our own images: the image demo (``qlora-app demo --images``) must run on a fresh machine with no dataset hub and
show a real lift on a vision-language model small enough to train on 2 CPU cores in a minute. The answer is only in
the pixels (the question names the shape, never the colour), the shape, its size, its place and the background vary,
so a model must read the image to answer; the colours are spread evenly, so guessing scores 1 / len(COLORS).

Everything is a pure function of the seed: the train and test splits are fixed and drawn from separate seeds.
Only the standard library is imported at module level; PIL and ``datasets`` inside the functions.
"""

from __future__ import annotations

import random

COLORS = {"red": (220, 30, 30), "green": (30, 170, 40), "blue": (30, 60, 220), "yellow": (235, 210, 20)}
SHAPES = ("square", "circle", "triangle")
BACKGROUNDS = ((255, 255, 255), (190, 190, 190), (60, 60, 60))
SIZE = 48  # pixels a side; every processor resizes to its own input size
TRAIN_SIZE = 600
TEST_SIZE = 200
TRAIN_SEED = 2468
TEST_SEED = 1357
QUESTION = "What color is the {shape}?"
SHAPE_QUESTION = "What shape is this?"  # the demo base's pretraining only: it learns to look at the picture


def draw(shape: str, color: str, rng: random.Random):
    """One image: ``shape`` in ``color`` at a random size and place on a random plain background."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (SIZE, SIZE), rng.choice(BACKGROUNDS))
    side = rng.randint(SIZE // 2, SIZE * 7 // 8)
    x, y = rng.randint(0, SIZE - side), rng.randint(0, SIZE - side)
    pen, fill = ImageDraw.Draw(img), COLORS[color]
    if shape == "square":
        pen.rectangle([x, y, x + side - 1, y + side - 1], fill=fill)
    elif shape == "circle":
        pen.ellipse([x, y, x + side - 1, y + side - 1], fill=fill)
    else:
        pen.polygon([(x + side // 2, y), (x, y + side - 1), (x + side - 1, y + side - 1)], fill=fill)
    return img


def shapes_rows(n: int, seed: int, true_colors: bool = True, ask_shape: float = 0.0) -> list[dict]:
    """``n`` rows {question, answer, image (PIL)}; colours spread evenly (each ``n / len(COLORS)`` times, shuffled).
    ``true_colors`` False: the answer is another colour drawn at random (the demo base's pretraining: it learns the
    form of an answer, never which colour it is); ``ask_shape``: the share of rows that ask for the shape instead
    (answered truly: the base learns to read the picture, not the colours)."""
    rng = random.Random(seed)
    names = list(COLORS)
    colors = [names[i % len(names)] for i in range(n)]
    rng.shuffle(colors)
    rows = []
    for color in colors:
        shape = rng.choice(SHAPES)
        said = color if true_colors else rng.choice(names)
        question = QUESTION.format(shape=shape)
        if ask_shape and rng.random() < ask_shape:
            question, said = SHAPE_QUESTION, shape
        rows.append({"question": question, "answer": said, "image": draw(shape, color, rng)})
    return rows


def shapes_dataset():
    """DatasetDict with fixed 'train' and 'test' splits; ``image`` a ``datasets`` Image column."""
    from datasets import Dataset, DatasetDict, Features, Image, Value

    features = Features({"question": Value("string"), "answer": Value("string"), "image": Image()})

    def split(n: int, seed: int):
        rows = shapes_rows(n, seed)
        return Dataset.from_dict({k: [r[k] for r in rows] for k in features}, features=features)

    return DatasetDict({"train": split(TRAIN_SIZE, TRAIN_SEED), "test": split(TEST_SIZE, TEST_SEED)})
