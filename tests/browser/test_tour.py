"""The tour (issue 20): after a day of demo work, each demo role logs in and visits every page
linked from its home and from its own view, and every export those pages link. A page fails the
tour on a 4xx or 5xx, a JavaScript error, a raw code ("budget_used_up") or "[invalid" in its
text, a filter whose current value is not the one selected, or a chart with neither a drawing
nor a sentence."""

import re
from urllib.parse import parse_qsl, urlsplit

import pytest

pytestmark = pytest.mark.browser
PlaywrightError = pytest.importorskip("playwright.sync_api").Error

# One demo user per role, and the role's own view.
ROLES = {
    "it": "/it/",
    "cio": "/leadership/",
    "finance": "/finance/",
    "head-language": "/departments/language/",
    "tenant-vision": "/tenants/vision/",
    "lead-pretraining": "/teams/pretraining/",
    "dev-agents": "/work/",
}
SKIPPED = ("/accounts/logout", "/static/", "/api/", "/admin/logout")
# A stored code: lower-case words joined by underscores, as no sentence writes them.
CODE = re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b")

LINKS = """() => [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href'))"""
FILTERS = """() => [...document.querySelectorAll('form[method=get] select:not([multiple])')].map(
    (s) => ({name: s.name, options: s.options.length,
             selected: [...s.options].filter((o) => o.defaultSelected).map((o) => o.value)}))"""
CHARTS = """() => [...document.querySelectorAll('figure.chart')].map((f) => ({
    title: f.querySelector('figcaption')?.innerText,
    drawn: f.querySelectorAll('.js-plotly-plot .main-svg').length > 0,
    sentence: (f.querySelector('.chart-empty')?.innerText || '').trim()}))"""


def _local(href: str, here: str) -> str | None:
    if not href or href.startswith(("#", "mailto:", "javascript:")):
        return None
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return None
    if href.startswith("?"):
        href = here.split("?")[0] + href
    elif not href.startswith("/"):
        return None
    return None if href.startswith(SKIPPED) else href


def _problems(page, path: str, response) -> list[str]:
    found = []
    if response is None or response.status >= 400:
        found.append(f"HTTP {response.status if response else 'no answer'}")
    text = page.inner_text("main") if page.locator("main").count() else page.inner_text("body")
    if "[invalid" in text:
        found.append("'[invalid' in the page")
    codes = sorted(set(CODE.findall(text)))
    if codes:
        found.append(f"raw codes {codes}")
    query = dict(parse_qsl(urlsplit(path).query))
    for select in page.evaluate(FILTERS):
        if select["options"] and len(select["selected"]) != 1:
            found.append(f"filter {select['name']}: selected {select['selected']}")
        elif select["name"] in query and select["selected"] != [query[select["name"]]]:
            found.append(
                f"filter {select['name']}: {query[select['name']]} asked, {select['selected']} shown"
            )
    for chart in page.evaluate(CHARTS):
        if not chart["drawn"] and not chart["sentence"]:
            found.append(f"chart {chart['title']!r} with neither data nor a sentence")
    return found


def _visit(browser, path: str):
    """The page at ``path``, and its answer; None for a link that downloads a file (an export
    without ``export=`` in its address), with the download's status instead."""
    page = browser.page
    try:
        response = page.goto(browser.server + path)
    except PlaywrightError as error:
        if "Download is starting" not in str(error):
            raise
        return None, browser.page.request.get(browser.server + path).status
    page.wait_for_load_state("load")
    if page.locator("figure.chart .klique-chart").count():
        page.wait_for_selector(".js-plotly-plot .main-svg")
    return page, response


def test_every_page_and_export_of_every_role_passes_the_tour(demo_estate, session):
    failures: dict[str, list[str]] = {}
    visited = 0
    for username, own in ROLES.items():
        browser = session()
        browser.log_in(username)
        queue, seen, exports = ["/", own], set(), set()
        while queue:
            path = queue.pop(0)
            if path in seen:
                continue
            seen.add(path)
            page, response = _visit(browser, path)
            visited += 1
            if page is None:
                if response >= 400:
                    failures[f"{username} download {path}"] = [f"HTTP {response}"]
                continue
            before = len(browser.errors)
            problems = _problems(page, path, response)
            if path in ("/", own):  # the pages linked from the role's home and own view
                for href in page.evaluate(LINKS):
                    link = _local(href, path)
                    if link and "export=" in link:
                        exports.add(link)
                    elif link and not link.startswith("/admin/") or link == "/admin/":
                        queue.append(link)
            else:
                exports.update(
                    link
                    for href in page.evaluate(LINKS)
                    if (link := _local(href, path)) and "export=" in link
                )
            problems += browser.errors[before:]
            if problems:
                failures[f"{username} {path}"] = problems
        for link in sorted(exports):
            answer = browser.page.request.get(browser.server + link)
            if answer.status >= 400:
                failures[f"{username} export {link}"] = [f"HTTP {answer.status}"]
        browser.close()
    assert visited > 40
    assert failures == {}


def test_the_resource_policy_admin_list_fits_1400_px(demo_estate, session):
    browser = session(width=1400, height=900)
    browser.log_in("it")
    page = browser.open("/admin/policies/resourcepolicy/")
    page.wait_for_selector("#result_list")
    right = page.evaluate("() => document.querySelector('#result_list').getBoundingClientRect().right")
    assert right <= 1400
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1400
    assert browser.errors == []
