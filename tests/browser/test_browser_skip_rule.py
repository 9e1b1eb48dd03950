"""When the browser tests skip and when they fail: a missing chromium is only acceptable outside CI."""

from pathlib import Path

from tests.browser.conftest import browser_missing


def test_it_runs_when_chromium_is_there(tmp_path):
    present = tmp_path / "chromium"
    present.touch()
    assert browser_missing(present, {"CI": "true"}) is None


def test_it_skips_with_the_reason_when_chromium_is_missing():
    outcome, reason = browser_missing(Path("/nonexistent/chromium"), {})
    assert outcome == "skip"
    assert "apt-get install chromium" in reason


def test_it_fails_when_chromium_is_missing_on_ci():
    outcome, _reason = browser_missing(Path("/nonexistent/chromium"), {"CI": "true"})
    assert outcome == "fail"


def test_it_skips_when_ci_is_set_to_something_else():
    outcome, _reason = browser_missing(Path("/nonexistent/chromium"), {"CI": "false"})
    assert outcome == "skip"
