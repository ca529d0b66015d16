"""The Content-Security-Policy (django-csp, the same in production) holds on the portal's pages in
headless Chromium: each demo role's pages, their charts drawn, with no policy violation reported
(``securitypolicyviolation`` events and console reports both listened to)."""

import pytest

from tests.browser.test_portal import ROLES

pytestmark = pytest.mark.browser

# Collected in the page before any of its scripts run.
LISTEN = """window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(
    `${e.violatedDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile}:${e.lineNumber}`));"""

EVERYONE = ["/", "/work/", "/notifications/", "/reports/", "/prices/", "/account/tokens/"]
EVERYONE += ["/api/docs/"]
DRAWN = {"/api/docs/": ".swagger-ui .info .title"}  # drawn by script
STAFF = ["/admin/", "/admin/pools/pool/", "/admin/pools/pool/add/"]


def test_the_policy_header_allows_no_inline_script(client, db):
    policy = client.get("/accounts/login/")["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert "unsafe" not in policy and directives["object-src"] == "'none'"


@pytest.mark.parametrize("username", ROLES)
def test_each_roles_pages_and_charts_pass_the_content_security_policy(demo_estate, session, username):
    _, home, chart_count = ROLES[username]
    browser = session()
    browser.context.add_init_script(LISTEN)
    reports = []
    browser.page.on("console", lambda m: "Content Security Policy" in m.text and reports.append(m.text))
    headers, missing = [], []
    browser.page.on("response", lambda r: r.status == 404 and missing.append(r.url))
    browser.page.on("response", lambda r: r.request.resource_type == "document" and headers.append(r))
    browser.log_in(username)
    for path in [home, *EVERYONE, *(STAFF if username == "it" else [])]:
        page = browser.open(path)
        page.wait_for_load_state("load")
        if path in DRAWN:
            page.wait_for_selector(DRAWN[path])
        if path == home:
            page.wait_for_selector(".js-plotly-plot .main-svg")
            assert page.locator("figure.chart").count() == chart_count  # drawn, or a sentence when empty
        violations = page.evaluate("window.__cspViolations")
        assert violations == [], (path, violations)
    assert reports == [] and missing == [] and browser.errors == []
    assert all("script-src 'self'" in r.headers["content-security-policy"] for r in headers)
