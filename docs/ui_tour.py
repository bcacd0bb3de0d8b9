"""Screenshots of the UI through a whole realistic run: the pictures in docs/, and a way to look at the UI at the
moments a user sees it.

    python docs/ui_tour.py [--runs runs] [--out /tmp/ui-tour] [--docs]

Starts the UI in-process on RUNS (default ./runs, a real runs folder: the pictures show real paths, not a test's
temp folder) and drives it in headless Chromium (Debian's /usr/bin/chromium) through the offline demo recipe
(preset demo-grpo: 200 GRPO steps from the shipped model on built-in arith, about two minutes on 2 CPU cores):

  train-1-start        just started, nothing logged yet
  train-2-first-point  the first logged step: one point per curve, visible
  train-3-many-points  half-way: smoothed reward, held-out accuracy rising
  train-4-stopped      Stop pressed: checkpointed and interrupted
  runs-5-resumed       Resume from the Runs tab: the run view follows it without a Refresh
  runs-6-finished      ... to the end, with the held-out summary and its `qlora-app eval` (general ability)
  compare, chat        the finished run against its base

With --docs the four pictures the docs use (ui-train, ui-runs, ui-compare, ui-chat) are also copied into docs/.
Not a test (tests/e2e/test_ui_browser.py is): it takes minutes and writes into a real folder.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
DOC_SHOTS = {"train-3-many-points": "ui-train", "runs-6-finished": "ui-runs", "compare": "ui-compare",
             "chat": "ui-chat"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _step(page) -> int:
    m = re.search(r"(\d+) / \d+ steps", page.locator("#train-progress").inner_text())
    return int(m.group(1)) if m else 0


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.3)


def tour(runs: Path, out: Path) -> list[Path]:
    from playwright.sync_api import expect, sync_playwright

    from app.ui.serve import launch

    out.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    port = _port()
    ui = launch(host="127.0.0.1", port=port, runs_dir=runs, local_only=True, block=False)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})

            def shot(name: str) -> None:
                path = out / f"{name}.png"
                page.screenshot(path=str(path), full_page=True)
                shots.append(path)
                print(f"  {path}", flush=True)

            page.goto(f"http://127.0.0.1:{port}/")
            page.locator("#preset input").click()
            page.get_by_role("option", name="demo-grpo").click()
            expect(page.locator("#cli-preview textarea")).to_have_value(re.compile("--preset demo-grpo"),
                                                                        timeout=20_000)
            page.locator("#start-btn").click()
            expect(page.locator("#train-message")).to_contain_text("started", timeout=30_000)
            expect(page.locator("#train-status")).to_contain_text("running", timeout=60_000)
            shot("train-1-start")
            _wait(lambda: _step(page) >= 10 and page.locator("#train-curves img").count() > 0, 300, "a logged step")
            time.sleep(2.5)  # one more UI tick: the curves drawn for that step
            shot("train-2-first-point")
            _wait(lambda: _step(page) >= 105, 600, "step 105")
            time.sleep(2.5)
            shot("train-3-many-points")
            page.locator("#stop-btn").click()
            expect(page.locator("#train-status")).to_contain_text("interrupted", timeout=120_000)
            time.sleep(2.5)
            shot("train-4-stopped")

            page.get_by_role("tab", name="Runs").click()
            expect(page.locator("#run-status")).to_contain_text("interrupted", timeout=20_000)
            page.locator("#resume-btn").click()
            expect(page.locator("#run-message")).to_contain_text("resumed", timeout=30_000)
            expect(page.locator("#run-status")).to_contain_text("running", timeout=60_000)  # no Refresh pressed
            time.sleep(6)
            shot("runs-5-resumed")
            expect(page.locator("#run-status")).to_contain_text("finished", timeout=600_000)
            expect(page.locator("#runs-table")).to_contain_text("finished", timeout=20_000)
            # its general ability, base vs adapter (lm-evaluation-harness): the run view shows it without a Refresh
            run = max((d for d in runs.iterdir() if (d / "config.yaml").is_file()), key=lambda d: d.stat().st_mtime)
            subprocess.run([sys.executable, "-m", "app.cli", "eval", str(run), "--tasks", "qlora_arith",
                            "--local-only"], check=True, capture_output=True, timeout=600)
            expect(page.locator("#run-status")).to_contain_text("general ability", timeout=30_000)
            time.sleep(3.5)
            shot("runs-6-finished")

            page.get_by_role("tab", name="Compare").click()
            for elem, value in [("cmp-n", "6"), ("cmp-tokens", "48")]:
                page.locator(f"#{elem} input").fill(value)
                page.locator(f"#{elem} input").press("Tab")
            page.locator("#cmp-btn").click()
            expect(page.locator("#cmp-html .row")).to_have_count(6, timeout=300_000)
            shot("compare")

            page.get_by_role("tab", name="Chat").click()
            page.locator("#chat-tokens input").fill("40")
            page.locator("#chat-tokens input").press("Tab")
            page.locator("#chat-msg textarea").fill("Tom has 3 apples and buys 4 more. How many apples does he have?")
            page.locator("#chat-send").click()
            expect(page.locator("#chat-base")).to_contain_text("Tom has 3 apples", timeout=120_000)
            expect(page.locator("#chat-send")).to_be_enabled(timeout=120_000)
            time.sleep(3)
            shot("chat")
            browser.close()
    finally:
        ui.close()
        ui.jobs.shutdown()
    return shots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs")
    ap.add_argument("--out", type=Path, default=Path("/tmp/ui-tour"))
    ap.add_argument("--docs", action="store_true", help="copy the docs' four pictures into docs/")
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} not found: apt-get install -y chromium", file=sys.stderr)
        return 2
    # a process entry, like `qlora-app ui --local-only`: the same process-wide settings, before Gradio loads
    from app.host.offline import apply_local_only, no_telemetry
    from app.host.process import start_command

    start_command()
    apply_local_only(True)
    no_telemetry()
    shots = tour(args.runs.resolve(), args.out)
    if args.docs:
        for path in shots:
            if path.stem in DOC_SHOTS:
                shutil.copyfile(path, ROOT / "docs" / f"{DOC_SHOTS[path.stem]}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
