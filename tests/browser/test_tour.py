"""The tour (issues 20 and 36): after a day of demo work, each demo role logs in and visits every
page linked from its home and from its own view, and every export those pages link. A page fails
the tour on a 4xx or 5xx, a JavaScript error, a raw code ("budget_used_up") or "[invalid" in its
text, a filter whose current value is not the one selected, a chart with neither a drawing nor a
sentence, and (issue 36):

- a number with trailing zeros ("48.000", "2.1000", "48.0"; two decimals only as money, "€2.10")
  or of 10,000 or more without a thousands separator ("24000"), in the page's text: not in dates,
  times, a named version ("CUR 2.0"), ``time``/``code``/``pre`` elements, form fields, a chart's
  drawing (plotly's axis ticks, "27.5, 28.0"), a link whose text is an id of its address
  (``<a href="/tasks/12345/">12345</a>``), a table column headed as an id ("Task", "ID", "#"), nor
  an id named in a sentence ("task 12345");
- an English plural error: "1 tasks", "(1 GPUs)", "2 task " (not "a 48 GPU reservation");
- server time over ``SERVER_BUDGET_MS``: the navigation's ``responseEnd - requestStart`` from the
  Performance API. 5 s is generous on purpose: the pages take tens to a few hundred ms on a quiet
  machine at the demo's size (the issue's goal, 300 ms, is measured by bench/portal_pages.py, not
  here), and a shared CI machine running the suite in parallel is noisy (``/it/`` took 1.1-1.3 s
  at load 6-8 beside other suites); the budget catches a page whose cost grows with the estate
  (the issue saw 5-25 s), not jitter. A page over it is loaded once more and fails only when both
  loads are over."""

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
SERVER_BUDGET_MS = 5000
# Dates, times, ISO instants and versions, taken out of the text before its numbers are read.
WHEN = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}:\d{2}(?::\d{2})?"
    r"|(?:\b[A-Z]{2,}|\b[Vv]ersion|\bReport)\s+\d+(?:\.\d+)+"  # a named version: "CUR 2.0"
)
# A figure standing alone (not inside a word, a version "1.2.0", an address or an id "#123").
DECIMAL = re.compile(r"(?<![\w.,#/])(\d{1,3}(?:,\d{3})+|\d+)\.(\d+)(?![\w.]|,\d)")
UNGROUPED = re.compile(r"(?<![\w.,#/-])\d{5,}(?![\w,/-]|\.\d)")
MONEY = re.compile(r"[€$£¥]\s?$|^\s?(?:[A-Z]{3}\b|/)")
ID_BEFORE = re.compile(r"\b(?:task|tasks|run|pass|array|job|id|worker|node)\s*$", re.IGNORECASE)
NOUNS = (
    "task|GPU|hour|day|week|month|minute|second|member|project|group|team|pool|worker|node|session|"
    "change|request|notification|preemption|reclaim|row|user|agent|loan|window|run|pass|result|job|array"
)
# A figure and its noun in one phrase (a space, not a table's cell or row break).
ONE_PLURAL = re.compile(rf"(?<![\w.,-])1[ \u00a0]+(?:{NOUNS})e?s\b")
# "2 task" is an error; "a 48 GPU reservation" (the figure and noun as an adjective) is not.
MANY_SINGULAR = re.compile(
    rf"(?<!\ba )(?<!\ban )(?<!\bthe )(?<![\w.,-])(?:0|[2-9]|[1-9][\d,]*\d)[ \u00a0]+(?:{NOUNS})(?![\w-])"
)
# The text nodes of the page's main part that a person reads as figures (see the docstring).
TEXTS = """() => {
  const root = document.querySelector('main') || document.body;
  const skipped = new Set();
  for (const table of root.querySelectorAll('table')) {
    const head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!head) continue;
    let at = 0;
    const ids = [];
    for (const th of head.cells) {
      if (/^(id|#|task|task id)$/i.test(th.innerText.trim())) ids.push(at);
      at += th.colSpan;
    }
    for (const body of table.tBodies) for (const row of body.rows) {
      let col = 0;
      for (const td of row.cells) { if (ids.includes(col)) skipped.add(td); col += td.colSpan; }
    }
  }
  for (const a of root.querySelectorAll('a[href]')) {
    const text = a.innerText.trim().replace(/^#/, '');
    if (/^\\d+$/.test(text) && a.getAttribute('href').split(/[/?=&]/).includes(text)) skipped.add(a);
  }
  const SVG = 'http://www.w3.org/2000/svg';
  const VERBATIM = /^(SCRIPT|STYLE|TEMPLATE|NOSCRIPT|TIME|CODE|PRE|KBD|SAMP|TEXTAREA|SELECT)$/;
  const out = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    let up = node.parentElement, keep = true;
    for (; up && keep; up = up.parentElement) {
      if (skipped.has(up) || VERBATIM.test(up.tagName) || up.namespaceURI === SVG) keep = false;
      if (up === root) break;
    }
    if (keep && node.nodeValue.trim()) out.push(node.nodeValue);
  }
  return out;
}"""
SERVER_MS = """() => {
  const [n] = performance.getEntriesByType('navigation');
  return n ? n.responseEnd - n.requestStart : null;
}"""

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
    found += _number_problems(page.evaluate(TEXTS))
    plurals = sorted({m.group() for m in (*ONE_PLURAL.finditer(text), *MANY_SINGULAR.finditer(text))})
    if plurals:
        found.append(f"plural errors {plurals}")
    server_ms = page.evaluate(SERVER_MS)
    if server_ms is not None and server_ms > SERVER_BUDGET_MS:
        page.reload()
        server_ms = min(server_ms, page.evaluate(SERVER_MS) or server_ms)
        if server_ms > SERVER_BUDGET_MS:
            found.append(f"server time {server_ms:.0f} ms over {SERVER_BUDGET_MS} ms, twice")
    return found


def _number_problems(texts: list[str]) -> list[str]:
    """Figures with trailing zeros or of 10,000 and more without separators (the docstring)."""
    zeros, ungrouped = set(), set()
    for raw in texts:
        text = WHEN.sub(" ", raw)
        for m in DECIMAL.finditer(text):
            places = m.group(2)
            money = len(places) == 2 and (MONEY.search(text[: m.start()]) or MONEY.search(text[m.end() :]))
            if places.endswith("0") and not money:
                zeros.add(m.group())
        for m in UNGROUPED.finditer(text):
            if not ID_BEFORE.search(text[: m.start()]):
                ungrouped.add(m.group())
    found = []
    if zeros:
        found.append(f"trailing zeros {sorted(zeros)}")
    if ungrouped:
        found.append(f"no thousands separator {sorted(ungrouped)}")
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
    assert failures == {}, "\n".join(f"{where}: {problems}" for where, problems in failures.items())


def test_the_resource_policy_admin_list_fits_1400_px(demo_estate, session):
    browser = session(width=1400, height=900)
    browser.log_in("it")
    page = browser.open("/admin/policies/resourcepolicy/")
    page.wait_for_selector("#result_list")
    right = page.evaluate("() => document.querySelector('#result_list').getBoundingClientRect().right")
    assert right <= 1400
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1400
    assert browser.errors == []
