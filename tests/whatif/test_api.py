"""What-if runs over the API (``/api/v1/whatif-runs/``): IT admins start a run of a recorded period,
read its progress and report and its CSV; every other role gets 403; bad input is a 400 naming the
field."""

import csv
import io

import pytest

from apps.accounts.models import Membership
from apps.whatif import runs
from apps.whatif.models import WhatIfRun
from tests.channels.conftest import client_for
from tests.factories import GroupFactory, MembershipFactory, UserFactory
from tests.whatif.recorded import CHANGES, END, START

URL = "/api/v1/whatif-runs/"
BODY = {
    "start": "2025-01-06T00:00:00Z",
    "end": "2025-01-06T00:16:40+00:00",
    "changes": CHANGES,
    "wait_threshold_s": 60,
    "title": "Vision +2",
}


@pytest.fixture
def ivy(it):
    return client_for(it)


def test_it_starts_a_run_follows_it_and_reads_its_report_and_csv(recorded, it, ivy):
    created = ivy.post(URL, BODY)
    assert created.status_code == 201, created.json()
    run = created.json()
    assert {k: run[k] for k in ("title", "created_by", "start", "end", "groups", "changes", "state")} == {
        "title": "Vision +2",
        "created_by": "ivy",
        "start": "2025-01-06T00:00:00Z",
        "end": "2025-01-06T00:16:40Z",
        "groups": [],
        "changes": CHANGES,
        "state": "queued",
    }
    assert (run["progress"], run["report"], run["wait_threshold_s"]) == (0.0, None, 60)
    assert ivy.get(f"{URL}{run['id']}/csv/").status_code == 409

    runs.execute(run["id"])  # the job (its dispatch waits for a commit this test never makes)
    done = ivy.get(f"{URL}{run['id']}/").json()
    assert (done["state"], done["progress"], done["tasks"], done["error"]) == ("done", 1.0, 6, "")
    vision = done["report"]["changed"]["groups"]["vision"]
    assert (vision["wait_median_s"], done["report"]["base"]["groups"]["vision"]["wait_median_s"]) == (0, 90)

    exported = ivy.get(f"{URL}{run['id']}/csv/")
    assert exported.status_code == 200 and exported["Content-Type"] == "text/csv; charset=utf-8"
    assert exported["Content-Disposition"] == f'attachment; filename="whatif-{run["id"]}.csv"'
    rows = list(csv.reader(io.StringIO(exported.content.decode())))
    assert rows[0] == ["metric", "name", "base", "changed", "difference"]
    assert ["wait_median_s", "vision", "90", "0", "-90"] in rows
    assert ["preemptions_reclaim", "agents", "0", "2", "2"] in rows
    only_csv = ivy.get(f"{URL}{run['id']}/csv/", HTTP_ACCEPT="text/csv")
    assert only_csv.status_code == 200 and only_csv.content == exported.content


def test_the_list_is_newest_first_paginated_and_leaves_the_report_out(recorded, it, ivy):
    ids = [ivy.post(URL, BODY | {"title": f"run {n}"}).json()["id"] for n in range(3)]
    runs.execute(ids[0])
    page = ivy.get(URL, {"limit": 2}).json()
    assert page["count"] == 3 and page["next"] and page["previous"] is None
    assert [r["id"] for r in page["results"]] == [ids[2], ids[1]]
    assert "report" not in page["results"][0]
    rest = ivy.get(page["next"]).json()
    assert [(r["id"], r["state"]) for r in rest["results"]] == [(ids[0], "done")]


@pytest.mark.parametrize(
    "change, field, reason",
    [
        ({"start": "2025-01-06T00:00:00"}, "start", "Give the time with its UTC offset"),
        ({"end": "2025-01-06 00:16:40"}, "end", "Give the time with its UTC offset"),
        ({"start": "yesterday"}, "start", "Datetime has wrong format"),
        ({"start": "0001-01-01T00:00:00+14:00"}, "start", "between the years 1 and 9999"),
        ({"start": 1736121600}, "start", "Datetime has wrong format"),
        ({"end": "2025-01-06T00:00:00Z"}, "end", "must be later than start"),
        ({"end": "9999-01-01T00:00:00Z"}, "end", "must not be in the future"),
        ({"start": "2024-01-01T00:00:00Z"}, "end", "the period may span at most 62 days"),
        ({"groups": ["nobody"]}, "groups", "unknown group 'nobody'"),
        ({"groups": "vision"}, "groups", 'Expected a list of items but got type "str".'),
        ({"changes": {"capacity": {"onprem": 8}}}, "changes", "unknown kind 'capacity'"),
        ({"changes": {"reservations": {"robotics": 2}}}, "changes", "reservations.robotics: unknown policy"),
        ({"changes": {"reservations": {"vision": -1}}}, "changes", "must be >= 0, got -1"),
        ({"changes": {"limits": {"vision": "4"}}}, "changes", "limits.vision: must be a number"),
        ({"changes": {"reservations": {"x": 1e30}}}, "changes", "must be below 1,000,000,000,000"),
        ({"changes": {"capacities": {"onprem": 10**20}}}, "changes", "must be below 1,000,000,000,000"),
        ({"changes": []}, "changes", 'Expected a dictionary of items but got type "list".'),
        ({"wait_threshold_s": "60"}, "wait_threshold_s", "Enter a whole number as a JSON integer"),
        ({"wait_threshold_s": -1}, "wait_threshold_s", "greater than or equal to 0"),
        ({"title": "x" * 201}, "title", "no more than 200 characters"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_saves_nothing(recorded, ivy, change, field, reason):
    refused = ivy.post(URL, BODY | change)
    assert refused.status_code == 400
    body = refused.json()
    assert list(body) == [field], body
    assert reason in body[field][0]
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize(
    "role",
    [
        Membership.Role.MEMBER,
        Membership.Role.TEAM_LEAD,
        Membership.Role.TENANT_ADMIN,
        Membership.Role.FINANCE,
    ],
)
def test_every_role_but_it_admin_gets_403_everywhere(recorded, it, role):
    run = WhatIfRun.objects.create(start=START, end=END, created_by=it, state="done", report=None)
    user = MembershipFactory(group=GroupFactory(slug=f"g-{role}"), role=role, user=UserFactory()).user
    api = client_for(user)
    for response in (
        api.get(URL),
        api.get(f"{URL}{run.pk}/"),
        api.get(f"{URL}{run.pk}/csv/"),
        api.post(URL, BODY),
    ):
        assert response.status_code == 403
        assert response.json() == {"detail": "Only IT admins run what-if replays."}
    assert WhatIfRun.objects.count() == 1


def test_without_credentials_401_and_an_unknown_run_404(recorded, ivy, client):
    assert client.get(URL).status_code == 401
    assert ivy.get(f"{URL}999999/").status_code == 404
    assert ivy.get(f"{URL}999999/csv/").status_code == 404
