"""Image data: the image column found by name and value in every layout (an Image feature, paths relative to the
file, several per row, LLaVA's <image> markers, image parts inside messages, data URLs), every image read and
checked, and a missing or unreadable one refused in one line naming the row."""

import base64
import io
import json
from types import SimpleNamespace

import pytest
from PIL import Image

from app.data.images import BY_NAME, IMAGES, decoded, find_image_field, image_values, is_image
from app.data.splits import build_splits
from app.errors import DataError


def _data(dataset, **kw):
    return SimpleNamespace(dataset=str(dataset), config_name=None, split=None, prompt_field=None, reference_field=None,
                           chosen_field=None, rejected_field=None, eval_split=None, heldout_size=4, max_samples=None,
                           mix=None, **kw)


def _png(path, color):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (12, 12), color).save(path)
    return path


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


COLORS = ["red", "blue", "green", "yellow"]


def test_values_that_are_images_and_values_that_are_not():
    assert is_image(Image.new("RGB", (2, 2)))
    assert is_image("imgs/cat.PNG") and is_image("https://x.org/a.jpg?s=1") and is_image("data:image/png;base64,AA")
    assert is_image({"bytes": b"\x89PNG....", "path": None}) and is_image({"bytes": None, "path": "a.webp"})
    assert not is_image("a cat on a mat") and not is_image("notes.txt") and not is_image({"text": "x"})
    assert image_values(["a.png", "b.jpg"]) == ["a.png", "b.jpg"] and image_values(["a.png", "text"]) is None


def test_the_builtin_shapes_images_are_detected_and_carried_as_images():
    train, heldout, det = build_splits(_data("shapes"), seed=1)
    assert (det.prompt_field, det.reference_field, det.image_field) == ("question", "answer", "image")
    assert det.images_per_row == (1, 1) and "images" in det.fields_line() and "image_field" in det.reasons
    row = heldout.select([0]).to_list()[0]
    [img] = decoded(row[IMAGES])
    assert img.size == (48, 48) and row["answer"] in COLORS


def test_paths_relative_to_the_file_and_several_images_per_row(tmp_path):
    rows = [{"question": f"What colors are these? ({i})", "answer": f"{c} and {c}",
             "pictures": [f"imgs/{i}a.png", f"imgs/{i}b.png"]} for i, c in enumerate(COLORS * 5)]
    for i, c in enumerate(COLORS * 5):
        _png(tmp_path / f"imgs/{i}a.png", c), _png(tmp_path / f"imgs/{i}b.png", c)
    train, heldout, det = build_splits(_data(_jsonl(tmp_path / "d.jsonl", rows)), seed=1)
    assert det.image_field == "pictures" and det.images_per_row == (2, 2) and det.prompt_field == "question"
    first = train.select([0]).to_list()[0]
    imgs = decoded(first[IMAGES])
    want = next(r for r in rows if r["question"] == first["question"])["answer"].split()[0]
    assert len(imgs) == 2 and imgs[0].getpixel((0, 0)) == Image.new("RGB", (1, 1), want).getpixel((0, 0))


def test_llava_layout_drops_the_image_marker_and_keeps_the_conversation(tmp_path):
    rows = [{"image": f"{i}.png", "conversations": [{"from": "human", "value": "<image>\nWhat color is it?"},
                                                   {"from": "gpt", "value": c}]} for i, c in enumerate(COLORS * 5)]
    for i, c in enumerate(COLORS * 5):
        _png(tmp_path / f"{i}.png", c)
    train, _, det = build_splits(_data(_jsonl(tmp_path / "llava.jsonl", rows)), seed=1)
    assert det.image_field == "image" and det.messages_field == "conversations"
    turn = train.select([0]).to_list()[0]["conversations"][0]
    assert turn["value"] == "What color is it?"


def test_image_parts_inside_messages_and_data_urls(tmp_path):
    def url(c):
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), c).save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    rows = [{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url(c)}},
                                                       {"type": "text", "text": "Which color?"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": c}]}]}
            for c in COLORS * 5]
    train, _, det = build_splits(_data(_jsonl(tmp_path / "chat.jsonl", rows)), seed=1)
    assert det.image_field == "messages" and det.messages_field == "messages" and det.images_per_row == (1, 1)
    assert len(decoded(train.select([0]).to_list()[0][IMAGES])) == 1


def test_an_image_column_is_never_taken_for_the_prompt():
    rows = [{"img": f"x/{i}.png", "caption": f"a {c} square seen from above"} for i, c in enumerate(COLORS * 4)]
    field, why = find_image_field(rows, ["img", "caption"])
    assert field == "img" and "images" in why


@pytest.mark.parametrize("problem", ["missing", "corrupt", "url offline", "no image"])
def test_a_bad_image_is_one_line_naming_the_row(tmp_path, problem):
    rows = [{"question": "What color?", "answer": c, "image": f"{i}.png"} for i, c in enumerate(COLORS * 5)]
    for i, c in enumerate(COLORS * 5):
        _png(tmp_path / f"{i}.png", c)
    if problem == "missing":
        (tmp_path / "7.png").unlink()
    elif problem == "corrupt":
        (tmp_path / "7.png").write_bytes(b"\x89PNG not really a png")
    elif problem == "url offline":
        rows[7]["image"] = "https://example.org/7.png"
    else:
        rows[7]["image"] = None
    data = _data(_jsonl(tmp_path / "d.jsonl", rows))
    with pytest.raises(DataError) as e:
        build_splits(data, seed=1, local_only=True)
    msg = str(e.value)
    assert "\n" not in msg and "row 8" in msg and "fix or remove the row" in msg
    assert {"missing": "not found", "corrupt": "not a readable image", "url offline": "--local-only",
            "no image": "has no image"}[problem] in msg


def test_a_column_named_for_images_that_holds_none_is_one_line(tmp_path):
    rows = [{"question": "What color?", "answer": c, "image_path": "n/a"} for c in COLORS * 5]
    with pytest.raises(DataError) as e:
        build_splits(_data(_jsonl(tmp_path / "d.jsonl", rows)), seed=1)
    assert "column 'image_path' is named for images but none" in str(e.value) and "\n" not in str(e.value)
    # a caption about an image is text, not an image column
    rows = [{"question": f"Describe it ({i})", "image_caption": f"a {c} square", "answer": c}
            for i, c in enumerate(COLORS * 5)]
    _, _, det = build_splits(_data(_jsonl(tmp_path / "c.jsonl", rows)), seed=1)
    assert det.image_field is None


def test_a_picture_held_in_memory_is_named_as_image_bytes_never_by_its_repr():
    from app.data.images import _shown

    for src in (io.BytesIO(b"\x89PNG"), b"\x89PNG", Image.new("RGB", (2, 2)), {"bytes": b"x", "path": None}):
        assert _shown(src) == "image bytes"
    assert _shown("pics/a.png") == "pics/a.png" and _shown({"path": "b.jpg"}) == "b.jpg"


def test_pictures_pass_through_the_conversions_as_stored(tmp_path):
    """The conversions map over the stored bytes (undecoded) and hand TRL a decoding column again; their sizes
    and how many there are come from the files' headers and the Arrow table."""
    from datasets import Image as ImageFeature

    from app.data.images import decoding, stored_bytes, stored_sizes, undecoded

    Image.new("RGB", (30, 20), "red").save(tmp_path / "a.png")
    rows = [{"image": "a.png", "question": f"q{i}?", "answer": "red"} for i in range(6)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    from app.config.schema import DataConfig

    train, _, _ = build_splits(DataConfig(dataset=str(tmp_path / "d.jsonl"), heldout_size=2), 1, local_only=True)
    raw = undecoded(train)
    assert isinstance(raw[0][IMAGES][0], dict) and raw[0][IMAGES][0]["bytes"][:4] == b"\x89PNG"
    assert stored_sizes(raw[0][IMAGES]) == [(20, 30)]
    assert stored_bytes(train) == (len(train), len(train) * len((tmp_path / "a.png").read_bytes()))
    back = decoding(raw)
    assert back.features[IMAGES].feature == ImageFeature() and back[0][IMAGES][0].size == (30, 20)
    assert undecoded(train.remove_columns([IMAGES])).column_names == [c for c in train.column_names if c != IMAGES]


def test_a_name_two_folders_share_is_never_read_from_another_folder(tmp_path):
    """cats/1.png and dogs/1.png: a row's path resolves to its own file or to nothing. With only one 1.png beside
    the data file (the pictures uploaded loose), neither row may take it by name alone: each is one line naming the
    fix. A name only one path carries is found by its name only in a folder of pictures kept by name (the UI's
    upload of loose files marks it); anywhere else a missing file is missing, never another file."""
    rows = [{"question": f"colour of {k}/{i}?", "answer": c, "image": f"{k}/{i}.png"}
            for k, c in (("cats", "red"), ("dogs", "blue")) for i in range(6)]
    data = _jsonl(tmp_path / "d.jsonl", rows)
    for k, c in (("cats", "red"), ("dogs", "blue")):
        for i in range(6):
            _png(tmp_path / k / f"{i}.png", c)
    train, heldout, _ = build_splits(_data(data), seed=1)
    for ds in (train, heldout):  # in their folders: every row shows its own picture
        for row in ds.to_list():
            [img] = decoded(row[IMAGES])
            assert img.getpixel((0, 0)) == Image.new("RGB", (1, 1), row["answer"]).getpixel((0, 0)), row["question"]
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / BY_NAME).touch()
    data = _jsonl(flat / "d.jsonl", rows)
    for i in range(6):  # the folders lost: one i.png each, the cats' (red)
        _png(flat / f"{i}.png", "red")
    with pytest.raises(DataError, match=r"named '\d\.png' too, in other folders.*upload them as one \.zip"):
        build_splits(_data(data), seed=1)
    solo = tmp_path / "solo"
    solo.mkdir()
    one = [{"question": f"q{i}", "answer": "red", "image": f"cats/{i}.png"} for i in range(6)]
    for i in range(6):
        _png(solo / f"{i}.png", "red")
    with pytest.raises(DataError, match=r"not found \(looked for .*cats/\d\.png\)"):  # unrelated files of one name
        build_splits(_data(_jsonl(solo / "d.jsonl", one)), seed=1)
    (solo / BY_NAME).touch()  # pictures kept by name (the UI's upload of loose files)
    train, _, _ = build_splits(_data(_jsonl(solo / "d.jsonl", one)), seed=1)
    assert len(train) > 0  # found by the name no other path carries
