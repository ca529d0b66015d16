"""The what-if page in headless Chromium, on the demo estate with a day of work: IT opens it from
the IT page, picks the last 24 hours, changes a reservation and a daily budget, runs it
(``WHATIF_INLINE``: a thread of the live server runs it), follows its progress to the end and sees
both sides with their charts, under the Content-Security-Policy. The page is saved as ``whatif.png``: under
``$KLIQUE_SCREENSHOTS`` when set (``docs/screenshots`` keeps it current), else in a temporary folder."""

import os
from pathlib import Path

import pytest

from apps.whatif.models import WhatIfRun
from tests.browser.test_csp import LISTEN

pytestmark = pytest.mark.browser


def test_it_runs_a_what_if_and_sees_both_sides_and_the_charts(demo_estate, session, settings, tmp_path):
    settings.WHATIF_INLINE = True
    shots = Path(os.environ.get("KLIQUE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    browser = session(width=1366, height=900)
    browser.context.add_init_script(LISTEN)
    polled = []
    browser.page.on("request", lambda r: r.url.endswith("/status/") and polled.append(r.url))
    page = browser.log_in("it")
    page = browser.open("/it/")
    page.click("#whatif-link")
    page.wait_for_url(browser.server + "/it/whatif/")

    page.select_option("#id_preset", "24h")
    assert page.input_value("#id_start") and page.input_value("#id_end")  # filled by whatif.js
    assert page.locator("#change-rows tbody tr").count() == 3
    page.click("#add-change")
    assert page.locator("#change-rows tbody tr").count() == 4
    page.select_option("#id_changes-0-kind", "reservations")
    page.select_option("#id_changes-0-target", "group:perception")
    page.fill("#id_changes-0-value", "36")
    page.select_option("#id_changes-3-kind", "budgets")
    page.select_option("#id_changes-3-target", "group:agents")
    page.fill("#id_changes-3-value", "8")
    page.select_option("#id_changes-3-period", "day")
    page.fill("#id_title", "Perception reserves 36, Agents 8 budget hours a day")
    page.screenshot(path=shots / "whatif-form.png", full_page=True)
    page.click("#whatif-form button[type=submit]")
    page.wait_for_url(browser.server + "/it/whatif/*/")

    run = WhatIfRun.objects.get()
    assert run.changes == {
        "reservations": {"perception": 36},
        "budgets": {"agents": {"hours": 8, "period": "day"}},
    }
    assert run.created_by.username == "it"
    # The page follows the run until it is done (it may be done before the page opens), then shows it.
    page.wait_for_selector("#waits table", timeout=120_000)
    run.refresh_from_db()
    assert (run.state, run.error) == ("done", "")
    assert "Done" in page.inner_text("#run-state")
    assert polled or run.finished_at is not None
    heads = page.locator("#waits thead tr").nth(1).all_inner_texts()[0]
    assert "As recorded" in heads and "Changed" in heads and "Difference" in heads
    assert page.locator("#waits tbody tr").count() == 15  # every group of the demo estate
    assert page.locator("#pools tbody tr").count() == 5
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").count() == 3
    assert "Reservation of Perception (GPUs)" in page.inner_text("#changes")
    assert page.evaluate("window.__cspViolations") == []

    page.screenshot(path=shots / "whatif.png", full_page=True)

    with page.expect_download() as download:
        page.click("#csv")
    assert download.value.suggested_filename == f"whatif-{run.pk}.csv"

    # Run again: the form comes back with this run's changes.
    page.click("#run-again")
    page.wait_for_url(browser.server + f"/it/whatif/?again={run.pk}#new-run")
    assert page.input_value("#id_changes-0-value") == "36"
    assert page.input_value("#id_changes-1-value") == "8"
    assert page.input_value("#id_title") == "Perception reserves 36, Agents 8 budget hours a day"
    assert browser.errors == []
