"""The Train tab's Detect on an image dataset: the image column, how many per row, and a few of its pictures."""

from app.ui.data_form import detect, detection_markdown


def test_detect_shows_the_image_column_and_its_pictures():
    result = detect("shapes")
    assert result["detection"]["image_field"] == "image" and len(result["thumbnails"]) == 4
    md = detection_markdown(result)
    assert "**images**: `image`, 1 per row" in md and md.count('<img src="data:image/png;base64,') == 4


def test_text_data_shows_no_images():
    result = detect("arith")
    assert result["thumbnails"] == [] and "**images**" not in detection_markdown(result)
    assert "image_field" not in result["detection"]  # inspect --json's contract for text data
