"""A change request in headless Chromium: Pretraining's lead asks for a reservation of 56 GPUs
from the team page, Language's head approves it on the requests page, and the team page then
shows the new reservation (rule: an approval applies the asked values at once)."""

import pytest

pytestmark = pytest.mark.browser


def test_a_team_lead_asks_the_department_head_approves_and_the_team_page_shows_it(demo_estate, session):
    lead = session()
    lead.log_in("lead-pretraining")
    page = lead.open("/teams/pretraining/")
    assert "a 48 GPU reservation" in page.inner_text("main")
    page.click("#ask-change")
    page.fill("#id_reservation", "56")
    page.fill("#id_justification", "The 70B pretraining run needs eight more GPUs guaranteed.")
    page.click("#request-form button[type=submit]")
    page.wait_for_url(lead.server + "/requests/")
    assert "Your request for Pretraining is filed" in page.inner_text("main")
    assert "Pending" in page.inner_text("#mine")

    head = session()
    head.log_in("head-language")
    page = head.open("/requests/")
    assert "Pretraining" in page.inner_text("#decide")
    page.click("#decide a:text('Open')")
    assert "The 70B pretraining run" in page.inner_text("main")
    page.check("input[name=decision][value=approve]")
    page.fill("#id_comment", "Approved for the quarter.")
    page.click("#decide-form button[type=submit]")
    page.wait_for_url(head.server + "/requests/")
    assert "The request for Pretraining is approved." in page.inner_text("main")

    page = lead.open("/teams/pretraining/")
    assert "a 56 GPU reservation" in page.inner_text("main")
    assert lead.errors == [] and head.errors == []
