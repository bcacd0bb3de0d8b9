"""The Chat tab's engine with an uploaded picture: a run trained on images answers about it, as `chat --image` does;
a broken file is one line before the model loads."""

import json

import pytest

from app.errors import UserError
from app.run import layout
from app.ui import chat_view as cv

pytestmark = pytest.mark.slow


def test_an_uploaded_picture_reaches_both_sides(images_demo, tmp_path):
    from PIL import Image

    from app.data.shapes import COLORS
    from app.eval.chat import Chat

    r, out = images_demo
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((out / layout.DEMO_IMAGES_JSON).read_text())["config"]["demo"]["run"]
    picture = tmp_path / "red.png"
    Image.new("RGB", (48, 48), COLORS["red"]).save(picture)
    holder, jobs = cv.ChatHolder(), _NoJob()
    [label] = cv.chat_choices(out)  # the run as the tab lists it
    *_, shown = cv.stream(holder, jobs, str(out), label, "", "What color is the square?", "adapter and base", 0.0, 6,
                          True, str(picture))
    alone = Chat(run, local_only=True)
    alone.set_images([Image.open(picture)])
    assert shown["adapter"] == alone.reply("adapter", "What color is the square?", max_new_tokens=6)
    assert shown["base"] in COLORS and shown["adapter"] in COLORS
    (tmp_path / "bad.png").write_text("no picture")
    with pytest.raises(UserError, match="not a readable image") as bad:
        list(cv.stream(holder, jobs, str(out), label, "", "hi", "adapter", 0.0, 4, True, str(tmp_path / "bad.png")))
    assert "image 'bad.png'" in str(bad.value) and str(tmp_path) not in str(bad.value)  # its name, not a temp path
    # asked without a picture, the run trained on pictures answers and says so above each answer
    *_, blind = cv.stream(holder, jobs, str(out), label, "", "What color is the square?", "adapter", 0.0, 4, True)
    assert blind["adapter"].startswith("(this run was trained on pictures and is asked without one")


class _NoJob:
    """The UI's job slot with no training run in it."""

    def is_running(self) -> bool:
        return False
