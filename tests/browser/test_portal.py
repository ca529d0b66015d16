"""The portal in headless Chromium, on the demo estate with two days of work: each demo role logs
in, sees its navigation and its charts drawn with no console error; a department head splits a
quota and sees the refusal over the department's total; finance exports a CSV; a developer submits
a task and sees it queued with its place. Each role's page is saved as a screenshot: under
``$KLIQUE_SCREENSHOTS`` when set (``docs/screenshots`` keeps them current), else in a temporary folder."""

import csv
import io
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
REFUSED = (
    "Failed to load resource: the server responded with a status of 400 (Bad Request)"  # the refused form
)

# demo user -> (the role views in the navigation, their page, the charts on it)
ROLES = {
    "cio": (["Leadership", "Finance", "My work"], "/leadership/", 4),
    "it": (["Leadership", "IT", "Finance", "My work"], "/it/", 3),
    "head-language": (["Language", "My work"], "/departments/language/", 2),
    "finance": (["Finance", "My work"], "/finance/", 2),
    "lead-pretraining": (["Pretraining", "My work"], "/teams/pretraining/", 3),
    "dev-pretraining": (["My work"], "/work/", 1),
}


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("KLIQUE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("username", ROLES)
def test_each_demo_role_sees_its_navigation_and_its_charts_with_no_console_errors(
    demo_estate, session, shots, username
):
    links, home, chart_count = ROLES[username]
    browser = session()
    page = browser.log_in(username)
    assert page.locator("nav .roles a").all_inner_texts() == links
    page.click(f"nav .roles a[href='{home}']")
    page.wait_for_url(browser.server + home)
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator("figure.chart").count() == chart_count  # drawn, or a sentence when empty
    # Plotly redraws a chart at its box's size shortly after the page's grid settles (charts.js).
    page.wait_for_function(f"() => ({OVERFLOWING_CHARTS})().length === 0", timeout=5000)
    page.screenshot(path=shots / f"{username}.png", full_page=True)
    assert browser.errors == []


# Charts whose drawing is wider than the box that holds them (so part of it would be cut off).
OVERFLOWING_CHARTS = """() => [...document.querySelectorAll('.js-plotly-plot')].map((chart) => {
    const box = chart.closest('.chart') || chart.parentElement;
    const svg = chart.querySelector('.main-svg');
    return {id: chart.id, svg: svg.getBoundingClientRect().width, box: box.clientWidth};
}).filter((c) => c.svg > c.box + 1)"""


def test_a_department_head_splits_a_quota_and_is_refused_over_the_department_total(demo_estate, session):
    browser = session()
    browser.log_in("head-language")
    page = browser.open("/departments/language/")
    page.click("text=Split the quota between the teams")
    alignment = page.locator("tr[data-team=alignment]")
    pretraining = page.locator("tr[data-team=pretraining]")
    alignment.locator("input[name$=reservation]").fill("40")
    page.click("text=Save the split")
    assert (
        "brings the reservations under Language policy to 88, above its reservation (80)"
        in page.inner_text(".errors-row")
    )
    alignment.locator("input[name$=reservation]").fill("32")
    pretraining.locator("input[name$=reservation]").fill("40")
    page.click("text=Save the split")
    page.wait_for_url(browser.server + "/departments/language/")
    assert "Quota split saved: Alignment, Pretraining." in page.inner_text("main")
    assert "reservation: 24 → 32" in page.inner_text("#changes")
    assert browser.errors == [REFUSED]


def test_finance_exports_the_chargeback_as_csv(demo_estate, session):
    browser = session()
    browser.log_in("finance")
    page = browser.open("/finance/")
    with page.expect_download() as download:
        page.click("#chargeback-csv")
    rows = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    assert rows[0][:2] == ["Group", "Kind"] and "Cost (EUR)" in rows[0]
    assert any(row[0] == "Pretraining" for row in rows[1:])
    with page.expect_download() as download:
        page.click("#groups .export")
    assert download.value.suggested_filename == "groups.csv"
    assert browser.errors == []


def test_a_developer_submits_a_task_and_sees_it_queued_with_its_place(demo_estate, session):
    browser = session()
    browser.log_in("dev-pretraining")
    page = browser.open("/work/")
    page.select_option("#id_compute_resource", label="pretraining/h100-8")
    page.fill("#id_name", "from the browser")
    page.fill("#id_command", "python train.py")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(browser.server + "/work/")
    message = page.inner_text(".notice")
    assert "submitted to pretraining/h100-8: number" in message and "in line" in message
    row = page.locator("#tasks tr", has_text="from the browser")
    cells = row.locator("td").all_inner_texts()
    place = message.split("number ")[1].split(" ")[0]
    assert "waiting" in cells and place in cells
    assert browser.errors == []


def test_on_a_phone_the_menu_opens_and_the_page_does_not_scroll_sideways(demo_estate, session, shots):
    browser = session(width=390, height=844)
    browser.log_in("lead-pretraining")
    page = browser.open("/teams/pretraining/")
    assert not page.locator("nav .roles").is_visible()
    page.click(".menu-button")
    assert page.locator("nav .roles a:text-is('Pretraining')").is_visible()
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.wait_for_function(f"() => ({OVERFLOWING_CHARTS})().length === 0", timeout=5000)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=shots / "lead-pretraining-phone.png", full_page=True)
    assert browser.errors == []
