"""`s3 report` in a real browser: Debian's headless Chromium driven by playwright opens the trajectory browser of a
real evaluation run from file://, filters, opens a question, and the DOM is checked; a screenshot is saved.

Chromium comes from Debian (`apt-get install chromium`, done by scripts/setup.sh when it runs as root) and is driven
through its executable path; playwright's own browser download is never used. Under CI=true a missing browser fails.
Set S3_REPORT_SCREENSHOT=PATH to keep the screenshot (docs/report.png is made that way).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from s3.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests" / "fixtures" / "committed_runs" / "musique_dev200" / "untrained"  # a real eval run
CHROMIUM = Path(os.environ.get("S3_CHROMIUM", "/usr/bin/chromium"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _browser_or_skip() -> object:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = "playwright (pip)" if sync_playwright is None else None if CHROMIUM.is_file() else f"{CHROMIUM} (apt chromium)"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test needs {missing}; CI installs it through scripts/setup.sh")
        pytest.skip(f"no {missing} on this machine")
    return sync_playwright


def test_report_opens_filters_and_shows_a_trajectory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sync_playwright = _browser_or_skip()
    run = tmp_path / "musique_dev200" / "untrained"
    shutil.copytree(RUN, run)
    shutil.copytree(RUN.parent / "data", run.parent / "data")  # gold paragraphs (questions.jsonl)
    assert main(["report", str(run), "--dataset", str(run.parent / "data")]) == 0
    page_path = run / "report" / "index.html"
    text = page_path.read_text()
    assert "fetch(" not in text and "http://" not in text.split("<script")[0]  # self-contained
    with sync_playwright() as p:  # type: ignore[operator]
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.resolve().as_uri())
            assert page.locator(".qrow").count() == 100
            assert "100 of 100 questions" in page.inner_text("#count")
            assert page.locator("#summary img").count() >= 1 and "GenAcc" in page.inner_text("#summary")

            page.select_option("#f-outcome", "correct")
            n_correct = page.locator(".qrow").count()
            assert 0 < n_correct < 100
            assert page.locator(".qrow .tag.correct").count() == n_correct
            page.select_option("#f-outcome", "wrong")
            page.select_option("#f-turns", "3")
            rows = page.locator(".qrow")
            assert rows.count() > 0
            assert all("3 turns" in t for t in rows.all_inner_texts())

            first = rows.first
            qtext = first.inner_text().split("\n")[-1]
            first.click()
            assert page.inner_text("#d-question") == qtext
            assert page.inner_text("#d-outcome") == "wrong"
            assert page.locator("#detail .turn").count() == 4  # turn 0 (the question) + 3 search turns
            want = page.evaluate("q => D.questions.find(x => x.question === q).steps.filter(s => s.query).length", qtext)
            assert page.locator("#detail .turn q.query").count() == want >= 1  # turn 0 searched the question
            assert page.locator("#detail .doc.gold").count() >= 2  # the gold paragraphs, marked
            assert page.locator("#detail .sel").count() >= 1  # what the searcher selected
            assert page.inner_text("#d-gold") and page.inner_text("#d-verdict")
            assert errors == []
            shot = Path(os.environ.get("S3_REPORT_SCREENSHOT") or tmp_path / "report.png")
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()
