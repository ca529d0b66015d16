"""The what-if page's issue-34 changes (docs/whatif.md, "The changes"): IT switches a parent group's
lending to fair (or back) and sets a group's over-quota weight in the change rows; they are saved
as the run's changes, shown in words, come back on "Run again", and a bad value is a 400 naming
the row's field."""

from html import escape

import pytest

from apps.whatif.models import WhatIfRun
from apps.whatif.tables import describe
from tests.whatif.test_page import URL, form, login  # noqa: F401 (login is a fixture)

pytestmark = pytest.mark.django_db


def test_a_lending_switch_and_a_weight_are_saved_described_and_shown_again(login):  # noqa: F811
    client = login("it")
    rows = [
        ("lending", "group:research", "fair"),
        ("over_quota_weights", "group:vision", "2.5"),
        ("lending", "group:vision", "priority"),
    ]
    response = client.post(URL, form(rows, start="", end="", preset="7d"))
    assert response.status_code == 302, response.content.decode()
    run = WhatIfRun.objects.get()
    assert run.changes == {
        "lending": {"research": "fair", "vision": "priority"},
        "over_quota_weights": {"vision": 2.5},
    }
    # Within a kind, the order is the database's (PostgreSQL's jsonb orders keys by length).
    assert sorted(describe(run.changes)) == [
        ("Lending of research to its children", "fair"),
        ("Lending of vision to its children", "priority"),
        ("Over-quota weight of vision", "2.5"),
    ]
    again = client.get(f"{URL}?again={run.pk}").context["forms"]
    assert sorted((r["kind"], r["target"], r["value"]) for r in again.rows.initial) == [
        ("lending", "group:research", "fair"),
        ("lending", "group:vision", "priority"),
        ("over_quota_weights", "group:vision", "2.5"),
    ]
    assert again.form["changes_json"].value() == ""


@pytest.mark.parametrize(
    ("rows", "field", "message"),
    [
        ([("lending", "group:research", "fast")], "changes-0-value", 'To: must be "priority" or "fair"'),
        ([("lending", "profile:h100-8", "fair")], "changes-0-target", "is set on a group"),
        (
            [("over_quota_weights", "group:vision", "-1")],
            "changes-0-value",
            "over_quota_weights.vision: must be >= 0",
        ),
    ],
)
def test_a_bad_lending_or_weight_row_is_a_400_naming_it(login, rows, field, message):  # noqa: F811
    response = login("it").post(URL, form(rows))
    assert response.status_code == 400
    assert escape(message) in response.content.decode()
    forms = response.context["forms"]
    errors = {
        f"changes-{i}-{name}": str(e)
        for i, row in enumerate(forms.rows.forms)
        for name, e in row.errors.items()
    }
    assert field in errors, errors
    assert WhatIfRun.objects.count() == 0
