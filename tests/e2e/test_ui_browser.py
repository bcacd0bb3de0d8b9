"""End to end in a real headless Chromium: start a tiny GRPO run from the Train tab, watch it finish with plotted
curves and the log's newest line in view, find it in Runs (the table fits the page), extend it with Resume and
watch the view follow it, compare base vs adapter in Compare, chat with both in Chat. Saves a screenshot of each tab
into a temporary folder, or into $QLORA_APP_SCREENSHOTS (tests never write into tracked files). With
$QLORA_APP_DEMO_RUN set to a run folder of `qlora-app demo`, Compare and Chat also show that trained adapter. The
docs' pictures come from a realistic run instead: `python docs/ui_tour.py --docs`."""

import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from app.run import layout, lookup

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _curves_drawn(page, elem_id: str) -> bool:
    """The run's curves figure (a PNG) is on screen and decoded."""
    img = page.locator(f"#{elem_id} img")
    return img.count() > 0 and img.first.evaluate("el => el.complete && el.naturalWidth > 0")


def _log_at_end(page) -> bool:
    """The train.log box shows its newest line (scrolled to the bottom)."""
    return page.locator("#train-log textarea").evaluate(
        "el => el.scrollHeight <= el.clientHeight + 4 || el.scrollTop + el.clientHeight >= el.scrollHeight - 4")


def test_train_runs_compare_in_chromium(tmp_path):
    """Driven on the shipped offline model and the built-in arith data, so the screenshots show real text."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install -y chromium)")
    from playwright.sync_api import expect, sync_playwright

    from app.ui.serve import launch

    runs = tmp_path / "runs"
    trained = os.environ.get("QLORA_APP_DEMO_RUN")
    if trained:
        import shutil

        shutil.copytree(trained, runs / "demo-grpo")
    shots = Path(os.environ.get("QLORA_APP_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    demo = launch(host="127.0.0.1", port=port, runs_dir=runs, local_only=True, block=False)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")

            # --- Train: the default preset (demo-grpo) with the user's own file: GSM8K-style columns the preset does
            # not name, one split only (the preset's eval split and fields must not follow it)
            from app.demo.recipe import base_model_path

            own = tmp_path / "my problems.jsonl"
            own.write_text("".join(json.dumps({"problem": f"Tom has {a} apples and buys {b} more. How many apples?",
                                               "solution": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n"
                                   for a in range(2, 12) for b in range(1, 7)))
            page.locator("#model textarea").fill(str(base_model_path()))
            page.locator("#dataset textarea").fill(str(own))
            page.locator("#dataset textarea").press("Tab")
            # picking DPO moves to the DPO preset on the same model and data, keeping what the user typed; back again
            info = page.locator("#preset").inner_text()
            page.locator("#method").get_by_label("dpo", exact=True).check()
            expect(page.locator("#preset input")).to_have_value("demo-dpo", timeout=20_000)
            expect(page.locator("#dataset textarea")).to_have_value(str(own))
            assert page.locator("#preset").inner_text() != info  # the description follows the preset
            page.locator("#method").get_by_label("grpo", exact=True).check()
            expect(page.locator("#preset input")).to_have_value("demo-grpo", timeout=20_000)
            expect(page.locator("#dataset textarea")).to_have_value(str(own))
            page.locator("#detect-btn").click()
            expect(page.locator("#detect-md")).to_contain_text("prompt: problem", timeout=60_000)
            expect(page.locator("#samples")).to_contain_text("How many")
            for elem, value in [("max-steps", "3"), ("save-steps", "2"), ("max-completion", "12"),
                                ("num-generations", "4"), ("max-length", "96")]:
                page.locator(f"#{elem} input").fill(value)
                page.locator(f"#{elem} input").press("Tab")
            page.locator("#batch-size textarea").fill("4")
            page.locator("#grad-accum textarea").fill("1")
            preview = page.locator("#cli-preview textarea")
            # the form starts from the demo's recipe (it shows learning): the command names it, and what changed
            expect(preview).to_have_value(re.compile(r"--preset demo-grpo .*--max-steps 3"), timeout=20_000)
            # the preset's values stand; its data keys are not unset by hand (they belong to its own dataset)
            unset = re.compile(r"lora\.r=|data\.prompt_field=|data\.reference_field=|eval_split")
            expect(preview).not_to_have_value(unset)
            # the run's view sits beside Start, not a page below it
            start_y = page.locator("#start-btn").bounding_box()["y"]
            for elem in ("#train-curves", "#train-log"):
                assert page.locator(elem).bounding_box()["y"] - start_y < 900, elem
            page.locator("#start-btn").click()
            expect(page.locator("#train-message")).to_contain_text("started", timeout=30_000)
            # a second Start while it runs is refused with a message
            page.locator("#start-btn").click()
            expect(page.locator("#train-message")).to_contain_text("already in progress", timeout=30_000)
            expect(page.locator("#train-status")).to_contain_text("finished", timeout=400_000)
            expect(page.locator("#train-progress")).to_contain_text("3 / 3 steps")
            deadline = time.time() + 30
            while not _curves_drawn(page, "train-curves"):
                assert time.time() < deadline, "no curves drawn in the Train tab"
                time.sleep(0.5)
            expect(page.locator("#train-log textarea")).to_have_value(re.compile("finished at step 3"), timeout=20_000)
            time.sleep(2.5)  # a tick after the last write
            assert _log_at_end(page), "the train.log box does not show its newest line"
            log_text = page.locator("#train-log textarea").input_value()
            font = page.locator("#train-log textarea").evaluate("t => getComputedStyle(t).fontFamily")
            assert "monospace" in font, font  # the end-of-run table keeps its columns
            warned = [ln for ln in log_text.splitlines() if "WARNING" in ln]
            assert len(warned) == len(set(warned)), "a warning is shown twice"
            assert "{'" not in log_text.splitlines()[0], "a raw Python dict in the log"
            # the refusal is no longer true once the run has ended, and leaves the page
            expect(page.locator("#train-message")).not_to_contain_text("already in progress", timeout=20_000)
            page.screenshot(path=str(shots / "ui-train.png"), full_page=True)

            # --- Runs: the run is listed as finished, its curves and config shown
            (run_dir,) = [d for d in lookup.list_runs(runs) if d.name != "demo-grpo"]
            page.get_by_role("tab", name="Runs").click()
            expect(page.locator("#runs-table")).to_contain_text(run_dir.name, timeout=20_000)
            expect(page.locator("#runs-table")).to_contain_text("finished")
            cell = page.locator("#runs-table").get_by_text(run_dir.name, exact=True).first
            assert cell.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), "the run's name is cut"
            expect(page.locator("#run-status")).to_contain_text("adapter", timeout=20_000)
            expect(page.locator("#run-config")).to_contain_text("method: grpo")
            deadline = time.time() + 20
            while not _curves_drawn(page, "run-curves"):
                assert time.time() < deadline, "no curves drawn in the Runs tab"
                time.sleep(0.5)
            # the eleven columns fit a 1400 px page: the last header cell ends inside the table's visible box
            table = page.locator("#runs-table").bounding_box()
            date_head = page.locator("#runs-table").get_by_text("date", exact=True).first
            box = date_head.bounding_box()
            assert box and box["x"] + box["width"] <= table["x"] + table["width"] + 1 <= 1400, (box, table)
            # Resume extends the finished run to 5 steps; the view follows it with no Refresh pressed
            page.locator("#resume-steps input").fill("5")
            page.locator("#resume-steps input").press("Tab")
            page.locator("#resume-btn").click()
            expect(page.locator("#run-message")).to_contain_text("resumed", timeout=30_000)
            expect(page.locator("#run-status")).to_contain_text("step 5 / 5", timeout=300_000)
            expect(page.locator("#run-status")).to_contain_text("finished", timeout=60_000)
            expect(page.locator("#runs-table")).to_contain_text("5/5", timeout=20_000)
            page.screenshot(path=str(shots / "ui-runs.png"), full_page=True)

            # --- Compare: a typed prompt + 1 held-out row, base and adapter side by side
            page.get_by_role("tab", name="Compare").click()
            expect(page.locator("#cmp-run input")).to_have_value(run_dir.name, timeout=20_000)
            expect(page.locator("#cmp-n input")).to_have_value("16")  # starts at something that compares
            page.locator("#cmp-prompt textarea").fill("Tom has 3 apples and buys 4 more. How many apples?")
            for elem, value in [("cmp-n", "1"), ("cmp-tokens", "16")]:
                page.locator(f"#{elem} input").fill(value)
                page.locator(f"#{elem} input").press("Tab")
            page.locator("#cmp-btn").click()
            expect(page.locator("#cmp-summary")).to_contain_text("wins", timeout=180_000)
            expect(page.locator("#cmp-html .row")).to_have_count(2)
            expect(page.locator("#cmp-html [data-side='base']")).to_have_count(2)
            expect(page.locator("#cmp-html [data-side='adapter']")).to_have_count(2)
            expect(page.locator("#cmp-html")).to_contain_text("reward")
            if trained:  # the picture for the docs: the demo's trained adapter on held-out problems
                page.locator("#cmp-run input").click()
                page.get_by_role("option", name="demo-grpo").click()
                page.locator("#cmp-prompt textarea").fill("")
                for elem, value in [("cmp-n", "6"), ("cmp-tokens", "48")]:
                    page.locator(f"#{elem} input").fill(value)
                    page.locator(f"#{elem} input").press("Tab")
                page.locator("#cmp-btn").click()
                expect(page.locator("#cmp-html .row")).to_have_count(6, timeout=180_000)
            page.screenshot(path=str(shots / "ui-compare.png"), full_page=True)

            # --- Chat: the run's system prompt prefilled, adapter and base answering the same message side by side,
            # greedy: the engine's (and so compare's) replies
            chat_run = "demo-grpo" if trained else run_dir.name
            page.get_by_role("tab", name="Chat").click()
            if trained:
                page.locator("#chat-run input").click()
                page.get_by_role("option", name="demo-grpo").click()
            expect(page.locator("#chat-run input")).to_have_value(chat_run, timeout=20_000)
            from app.config.build import load_yaml_file
            from app.eval.chat import Chat

            system = load_yaml_file(runs / chat_run / layout.CONFIG)["data"]["system_prompt"]
            expect(page.locator("#chat-system textarea")).to_have_value(system, timeout=20_000)
            page.locator("#chat-tokens input").fill("24")
            page.locator("#chat-tokens input").press("Tab")
            question = "Tom has 3 apples and buys 4 more. How many apples does he have?"
            # (before Send: loading a model while another thread generates is not safe in transformers)
            engine = Chat(runs / chat_run, local_only=True)
            want = {side: engine.reply(side, question, max_new_tokens=24) for side in ("adapter", "base")}
            del engine
            page.locator("#chat-msg textarea").fill(question)
            page.locator("#chat-msg textarea").press("Enter")  # Enter sends
            for side in ("adapter", "base"):
                expect(page.locator(f"#chat-{side}")).to_contain_text(question, timeout=120_000)
                expect(page.locator(f"#chat-{side}")).to_contain_text(want[side][:40], timeout=120_000)
            expect(page.locator("#chat-msg textarea")).to_have_value("")
            # Stop during a long sampled answer leaves the page usable and says nothing went wrong
            page.locator("#chat-who").get_by_label("adapter", exact=True).check()
            page.locator("#chat-msg textarea").fill("Write a long story about apples.")
            page.locator("#chat-send").click()
            page.locator("#chat-stop").click()
            expect(page.locator("#chat-adapter")).to_contain_text("Write a long story", timeout=30_000)
            expect(page.locator("#chat-note")).not_to_contain_text("error", timeout=30_000)
            expect(page.locator("#chat-base")).not_to_contain_text("Write a long story")  # adapter alone answered
            page.screenshot(path=str(shots / "ui-chat.png"), full_page=True)
            browser.close()
    finally:
        demo.close()
        demo.jobs.shutdown()
