"""Headless Chromium (Debian's ``chromium``) driven by Playwright for Python, against pytest-django's
live server. Playwright's sync API runs an event loop in the test's thread while the browser is
open, so the tests' own ORM calls are allowed with DJANGO_ALLOW_ASYNC_UNSAFE for that time only."""

import os
import shutil

import pytest

from apps.portal import demo
from tests.browser import history

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def chromium():
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing (CI is set, so this is a failure, not a skip)")
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}: apt-get install -y chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with pytest.MonkeyPatch.context() as patch, sync_api.sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def demo_estate(transactional_db):
    demo.seed()
    history.run(days=1)


class Session:
    """A browser page logged in through the portal's login form; it records console errors."""

    def __init__(self, browser, server_url: str, *, width: int = 1366, height: int = 900):
        self.context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
        self.page = self.context.new_page()
        self.server = server_url
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str):
        self.page.goto(self.server + path)
        return self.page

    def log_in(self, username: str):
        page = self.open("/accounts/login/")
        page.fill("#id_login", username)
        page.fill("#id_password", demo.demo_password())
        page.click("#login-form button[type=submit]")
        page.wait_for_url(self.server + "/")
        return page

    def close(self):
        self.context.close()


@pytest.fixture
def session(chromium, live_server):
    opened = []

    def start(**kwargs) -> Session:
        opened.append(Session(chromium, live_server.url, **kwargs))
        return opened[-1]

    yield start
    for s in opened:
        s.close()
