"""The quota advisor's faces (docs/whatif.md, "Quota advisor"): the page side by side with the
replay and its one-click and edited acceptance, the API, the monthly beat task and the command,
on tests/whatif's recorded borrowing period."""

import io
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from apps.accounts.models import Membership
from apps.governance.models import ChangeRequest
from apps.whatif import advisor, runs
from apps.whatif.models import AdvisorProposal
from tests.whatif.test_advisor import _head, proposal  # noqa: F401 (the fixture)


@pytest.fixture
def replayed(proposal):  # noqa: F811
    runs.execute(proposal.run_id)
    return proposal


def test_page_shows_the_proposal_beside_its_replay_and_accepts_it_in_one_click(client, replayed):
    head = _head(Membership.Role.DEPARTMENT_HEAD)
    client.force_login(head)
    page = client.get(f"/advisor/{replayed.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-group="vision"' in html and 'data-group="agents"' not in html  # their group only
    row = html[html.index('data-group="vision"') :]
    # reservation 0 -> 2, limit 4 kept; recorded p95 time to start 91 s; replay waits 90 s -> 0 s
    assert ">0</td><td>4</td>" in row and ">2</td><td>4</td>" in row
    assert "91 s (guarantee 60 s)" in row and "90 s / 90 s" in row and "0 s / 0 s" in row
    assert 'name="reservation" value="2"' in row and 'name="limit" value="4"' in row
    answer = client.post(f"/advisor/{replayed.pk}/accept/vision/", {"reservation": "2", "limit": "4"})
    assert answer.status_code == 302
    request = ChangeRequest.objects.get()
    assert (request.reservation, request.limit, request.requester) == (2, None, head)
    assert "Change request" in client.get(f"/advisor/{replayed.pk}/").content.decode()


def test_page_accepts_figures_edited_first(client, replayed):
    client.force_login(_head(Membership.Role.LEADERSHIP))
    client.post(f"/advisor/{replayed.pk}/accept/vision/", {"reservation": "1", "limit": "3"})
    assert ChangeRequest.objects.get().reservation == 1


def test_page_shows_a_refused_value_and_files_nothing(client, replayed):
    client.force_login(_head(Membership.Role.LEADERSHIP))
    answer = client.post(f"/advisor/{replayed.pk}/accept/vision/", {"reservation": "x"}, follow=True)
    assert "Enter a number." in answer.content.decode() and not ChangeRequest.objects.exists()


def test_api_lists_the_visible_rows_and_accepts(client, replayed):
    head = _head(Membership.Role.DEPARTMENT_HEAD)
    client.force_login(head)
    listed = client.get("/api/v1/advisor-proposals/").json()
    results = listed["results"] if isinstance(listed, dict) else listed
    assert [row["group"] for row in results[0]["groups"]] == ["vision"]
    assert results[0]["run_state"] == "done"
    url = f"/api/v1/advisor-proposals/{replayed.pk}/accept/"
    answer = client.post(url, {"group": "vision"}, content_type="application/json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["state"] == "pending"
    again = client.post(url, {"group": "vision"}, content_type="application/json")
    assert again.status_code == 400 and "accepted already" in again.content.decode()
    refused = client.post(url, {"group": "agents"}, content_type="application/json")
    assert refused.status_code == 403


def test_api_refuses_people_without_a_department_or_unit(client, replayed):
    client.force_login(_head(Membership.Role.TEAM_LEAD))
    assert client.get("/api/v1/advisor-proposals/").status_code == 403
    assert client.get(f"/advisor/{replayed.pk}/").status_code == 403


def test_monthly_beat_task_proposes_for_last_month_once(recorded, settings):
    now = datetime(2025, 2, 10, 12, tzinfo=UTC)
    first = advisor.propose_last_month(now)
    assert (first.start, first.end) == (datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC))
    assert first.created_by is None and first.run.title == "Quota advisor: 2025-01-01 to 2025-02-01"
    assert advisor.propose_last_month(now) is None
    assert AdvisorProposal.objects.count() == 1
    assert "quota-advisor" in settings.CELERY_BEAT_SCHEDULE
    from klique.celery import app

    app.loader.import_default_modules()
    assert "klique.whatif.propose_quotas" in app.tasks


def test_command_proposes_quotas_for_a_chosen_period(recorded):
    out = io.StringIO()
    call_command("propose_quotas", start="2025-01-06", end="2025-01-07", wait=0, stdout=out)
    found = AdvisorProposal.objects.get()
    assert (found.start, found.end) == (
        datetime(2025, 1, 6, tzinfo=UTC),
        datetime(2025, 1, 7, tzinfo=UTC),
    )
    assert out.getvalue().startswith(f"Proposal {found.pk}: ")


def test_page_shows_each_pools_cost_in_both_replays_at_its_gpu_price(client, replayed):
    from datetime import date
    from decimal import Decimal

    from apps.pools.models import Pool
    from apps.pricing.models import Price

    replayed.run.refresh_from_db()
    report = replayed.run.report
    name = next(iter(report["base"]["pools"]))
    pool = Pool.objects.get(name=name)
    Price.objects.create(
        gpu_type=pool.gpu_type, currency="EUR", per_gpu_hour=Decimal("2.00"), effective_from=date(2020, 1, 1)
    )
    currency, costs = advisor.pool_costs(report, replayed.start)
    hours = [Decimal(str(report[side]["pools"][name]["gpu_hours"])) for side in ("base", "changed")]
    assert currency == "EUR" and costs[name] == tuple((h * 2).quantize(Decimal("0.01")) for h in hours)
    client.force_login(_head(Membership.Role.DEPARTMENT_HEAD))
    html = client.get(f"/advisor/{replayed.pk}/").content.decode()
    assert 'id="advisor-total-cost"' in html and "Cost as recorded (EUR)" in html
    assert f"€{costs[name][0]:,.2f}" in html
