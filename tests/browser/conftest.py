"""Browser tests: Playwright driving Debian's chromium against pytest-django's live server.

Without /usr/bin/chromium these tests are skipped with the reason, except when CI=true,
where a missing browser is a failure (CI must run them). Never `playwright install`.
"""

import json
import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a
# thread with a running loop unless told otherwise. Only these tests need it.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# The README's pictures are rewritten only when asked (`make screenshots`), so a test run
# leaves the work tree clean; otherwise they go to a scratch folder.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("UPDATE_SCREENSHOTS") == "1"
    else Path(os.environ.get("VAR_DIR", "/tmp")) / "screenshots"
)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


def browser_missing(path: Path, environ) -> tuple[str, str] | None:
    """None when the browser is there; else ("skip" or "fail", the reason). CI=true must run them."""
    if path.exists():
        return None
    reason = f"{path} is missing: install Debian's chromium (apt-get install chromium) to run the browser tests"
    if environ.get("CI", "").strip().lower() == "true":
        return "fail", f"CI=true and {reason}"
    return "skip", reason


@pytest.fixture(scope="session")
def chromium():
    missing = browser_missing(CHROMIUM, os.environ)
    if missing is not None:
        outcome, reason = missing
        if outcome == "fail":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(chromium, live_server):
    """A fresh browser context at 1280 px wide; fails the test on any console error (CSP violations included)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.console_errors = errors
    yield page
    context.close()
    assert not errors, f"the browser console reported errors: {errors}"


@pytest.fixture
def demo_fleet(transactional_db, simgrid_path, settings):
    """The demo fleet `make run` shows, built on this test's own simulated grid; returns the demo logins."""
    from django.core.management import call_command

    # pytest-django runs with DEBUG off; the test database is as throwaway as a machine gets.
    call_command("demo_fleet", force=True, verbosity=0)
    return json.loads((Path(settings.VAR_DIR) / "demo-logins.json").read_text())


@pytest.fixture
def celery_worker(transactional_db):
    """A real Celery worker in this process (solo pool) on the Redis broker from CELERY_BROKER_URL."""
    from celery.contrib.testing.worker import start_worker

    from config.celery import app
    from tests.support import worker_stops_quickly

    # Messages left by an earlier run (or a test without a worker) name jobs that are gone.
    app.control.purge()
    with worker_stops_quickly(app), start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        yield app


def log_in(page, username: str, password: str, *, then: str = "/") -> None:
    page.goto(then)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def confirm_reregister(page) -> None:
    """Ask for the node's re-register as a person does: open the confirmation, then confirm it."""
    confirm = page.locator("#reregister-confirm")
    if confirm.get_attribute("open") is None:
        confirm.locator("summary").click()
    page.get_by_role("button", name="Re-register now").click()


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), full_page=full_page)
    return path
