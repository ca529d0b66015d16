"""The what-if page for IT (docs/whatif.md, "The what-if page"): the form saves a run with the changes
its rows and JSON say; bad input is a 400 naming the field; a run of a period recorded on the
database (tests/whatif/recorded.py, executed here with ``runs.execute``) shows both sides with
their difference, exact figures; its CSV; progress as JSON; "Run again" fills the form; IT only."""

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from html import escape
from html.parser import HTMLParser

import pytest
from django.utils import timezone

from apps.accounts.models import User
from apps.policies.models import ResourcePolicy
from apps.portal import demo
from apps.whatif import runs, services
from apps.whatif.forms import RunForms, preset_period
from apps.whatif.models import WhatIfRun
from tests.whatif.recorded import CHANGES, START, asked

pytestmark = pytest.mark.django_db
URL = "/it/whatif/"


class Tables(HTMLParser):
    """The body rows of each table, as cell texts, by the id of the section holding it."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.section, self.rows, self.cell, self.in_body = None, None, None, False

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.section = dict(attrs).get("id")
        elif tag == "tbody":
            self.in_body, self.rows = True, self.tables.setdefault(self.section, [])
        elif tag == "tr" and self.in_body:
            self.rows.append([])
        elif tag in ("td", "th") and self.in_body:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join(self.cell.split()))
            self.cell = None
        elif tag == "tbody":
            self.in_body = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def tables(response) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(response.content.decode())
    return parser.tables


def form(rows=(), **fields) -> dict:
    """The form's POST body: ``rows`` of (kind, target, value[, period])."""
    data = {
        "start": "2025-01-06T00:00",
        "end": "2025-01-06T00:16:40",
        "wait_threshold_s": "60",
        "title": "",
        "changes-TOTAL_FORMS": str(len(rows) + 1),
        "changes-INITIAL_FORMS": "0",
    }
    for i, (kind, target, value, *period) in enumerate(rows):
        data |= {f"changes-{i}-kind": kind, f"changes-{i}-target": target, f"changes-{i}-value": value}
        data[f"changes-{i}-period"] = period[0] if period else ""
    return data | fields


@pytest.fixture
def login(client, db):
    """A client logged in as a person of the demo estate."""
    demo.seed()

    def as_user(username: str):
        client.force_login(User.objects.get(username=username))
        return client

    return as_user


@pytest.fixture
def it_client(client, it):
    client.force_login(it)
    return client


def test_it_runs_a_reservation_change_and_sees_both_sides_with_exact_figures(recorded, it, it_client):
    response = it_client.post(URL, form([("reservations", "group:vision", "2")], title="Vision reserves 2"))
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"{URL}{run.pk}/"
    assert (run.changes, run.groups, run.wait_threshold_s, run.created_by, run.state) == (
        CHANGES,
        [],
        60,
        it,
        "queued",
    )
    assert (run.start, run.end) == (START, START + timedelta(seconds=1000))
    runs.execute(run.pk)

    page = it_client.get(f"{URL}{run.pk}/")
    assert page.status_code == 200
    shown = tables(page)
    # group | median wait: recorded, changed, difference | p95 wait | tasks waiting over 60 s
    assert shown["waits"] == [
        ["agents", "0", "25", "+25", "0", "50", "+50", "0", "0", "0"],
        ["vision", "90", "0", "-90", "90", "0", "-90", "2", "0", "-2"],
    ]
    # tasks | GPU-hours | budget hours (one decimal: klique/numbers.py; the CSV keeps them exact)
    assert shown["hours"] == [
        ["agents", "4", "4", "0", "0.1", "0.1", "< 0.1", "0.1", "0.1", "< 0.1"],
        ["vision", "2", "2", "0", "< 0.1", "< 0.1", "0", "< 0.1", "< 0.1", "0"],
    ]
    assert shown["preemptions"] == [
        ["agents", "0", "0", "0", "0", "2", "+2"],
        ["All groups", "0", "0", "0", "0", "2", "+2"],
    ]
    assert shown["pools"] == [["onprem", "13 %", "13 %", "+1 %", "0.1", "0.1", "< 0.1"]]
    assert shown["states"] == [["completed", "6", "6", "0"]]
    assert shown["overshoot"] == [["No budget window in the scope."]]
    assert shown["changes"] == [["Reservation of vision (GPUs)", "2"]]
    html = page.content.decode()
    assert html.count('class="plotly-graph-div klique-chart"') == 3
    assert "whatif-wait-figure" in html and "Run again" in html

    exported = it_client.get(f"{URL}{run.pk}/csv/")
    assert exported.status_code == 200 and exported["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(exported.content.decode())))
    assert rows[0] == ["metric", "name", "base", "changed", "difference"]
    assert ["wait_median_s", "vision", "90", "0", "-90"] in rows
    assert ["wait_p95_s", "agents", "0", "50", "50"] in rows
    assert ["gpu_hours", "agents", "0.111111", "0.116667", "0.005556"] in rows
    assert ["utilization", "onprem", "0.125", "0.13", "0.005"] in rows
    assert ["preemptions_reclaim", "", "0", "2", "2"] in rows

    listed = it_client.get(URL)
    assert listed.status_code == 200
    (row,) = tables(listed)["runs"]
    assert row == [
        "Vision reserves 2",
        "ivy",
        "2025-01-06 00:00 to 2025-01-06 00:16 UTC",
        "whole estate",
        "Done",
        row[5],
    ]


def test_progress_is_polled_as_json_until_the_run_is_done(recorded, it, it_client):
    run = services.start_run(it, asked(groups=["vision"], changes={}))
    status = it_client.get(f"{URL}{run.pk}/status/")
    assert status.json() == {
        "state": "queued",
        "state_display": "Queued",
        "progress": 0.0,
        "tasks": None,
        "finished": False,
        "error": "",
    }
    page = it_client.get(f"{URL}{run.pk}/")
    assert (
        'data-status-url="/it/whatif/' in page.content.decode()
        and "whatif-progress-bar" in page.content.decode()
    )
    assert it_client.get(f"{URL}{run.pk}/csv/").status_code == 404
    runs.execute(run.pk)
    assert it_client.get(f"{URL}{run.pk}/status/").json() | {"tasks": 2} == {
        "state": "done",
        "state_display": "Done",
        "progress": 1.0,
        "tasks": 2,
        "finished": True,
        "error": "",
    }
    page = it_client.get(f"{URL}{run.pk}/")
    assert "whatif-progress-bar" not in page.content.decode()
    # vision alone on the pool (the scope leaves agents out): nothing to wait for
    assert tables(page)["waits"] == [["vision", "0", "0", "0", "0", "0", "0", "0", "0", "0"]]


def test_a_failed_run_shows_its_error(it, it_client):
    run = WhatIfRun.objects.create(
        start=START, end=START + timedelta(hours=1), state="failed", error="internal error: KeyError"
    )
    page = it_client.get(f"{URL}{run.pk}/")
    assert page.status_code == 200
    assert "The run failed: internal error: KeyError" in page.content.decode()
    assert it_client.get(f"{URL}{run.pk}/csv/").status_code == 404
    assert it_client.get(f"{URL}{run.pk + 1}/").status_code == 404


# -- the form on the demo estate -------------------------------------------------------------


def test_the_rows_and_the_json_make_the_runs_changes(login):
    client = login("it")
    rows = [
        ("reservations", "group:vision", "64"),
        ("limits", "group:vision", "130.5"),
        ("budgets", "group:language", "30000", "month"),
        ("budgets", "group:agents", "4", "day"),
        ("budgets", "group:agents", "20", "week"),
        ("budgets", "group:ranking", ""),
        ("time_weights", "profile:h100-8", "1.5"),
        ("pool_order", "profile:h100-8", "cloud-h100, hpc-slurm"),
        ("capacities", "pool:hpc-slurm", "192"),
    ]
    extra = {"capacities": {"baremetal": 24}}
    response = client.post(
        URL, form(rows, start="", end="", preset="7d", changes_json=json.dumps(extra), title="Big what-if")
    )
    assert response.status_code == 302, response.content.decode()
    run = WhatIfRun.objects.get()
    assert run.changes == {
        "reservations": {"vision": 64},
        "limits": {"vision": 130.5},
        "budgets": {
            "language": {"hours": 30000, "period": "month"},
            "agents": [{"hours": 4, "period": "day"}, {"hours": 20, "period": "week"}],
            "ranking": [],
        },
        "time_weights": {"h100-8": 1.5},
        "pool_order": {"h100-8": ["cloud-h100", "hpc-slurm"]},
        "capacities": {"hpc-slurm": 192, "baremetal": 24},
    }
    assert (run.start, run.end) == preset_period("7d", run.created_at)
    assert run.end == run.created_at.replace(hour=0, minute=0, second=0, microsecond=0)
    assert run.title == "Big what-if" and run.created_by.username == "it"
    # The live estate is not touched.
    assert ResourcePolicy.objects.get(group__slug="vision").reservation == 60

    # Run again: the form comes back with the same changes, which post back to the same run.
    again = client.get(f"{URL}?again={run.pk}")
    assert again.status_code == 200
    forms = again.context["forms"]
    data = {
        "changes-TOTAL_FORMS": str(len(forms.rows.forms)),
        "changes-INITIAL_FORMS": str(forms.rows.initial_form_count()),
        "start": forms.form["start"].value().strftime("%Y-%m-%dT%H:%M"),
        "end": forms.form["end"].value().strftime("%Y-%m-%dT%H:%M"),
        "wait_threshold_s": forms.form["wait_threshold_s"].value(),
        "title": forms.form["title"].value(),
        "changes_json": forms.form["changes_json"].value(),
    }
    for i, row in enumerate(forms.rows.forms):
        data |= {
            f"changes-{i}-{name}": row[name].value() or "" for name in ("kind", "target", "value", "period")
        }
    assert data["changes_json"] == ""
    assert sum(1 for i in range(len(forms.rows.forms)) if data[f"changes-{i}-kind"]) == len(rows) + 1
    assert client.post(URL, data).status_code == 302
    second = WhatIfRun.objects.exclude(pk=run.pk).get()
    assert (second.changes, second.start, second.end, second.title) == (
        run.changes,
        run.start,
        run.end,
        run.title,
    )


def test_a_saved_change_the_rows_cannot_show_comes_back_as_json(login):
    client = login("it")
    run = WhatIfRun.objects.create(
        start=START,
        end=START + timedelta(days=1),
        changes={"reservations": {"gone": 4, "vision": 70}},
        groups=["research"],
    )
    forms = client.get(f"{URL}?again={run.pk}").context["forms"]
    assert json.loads(forms.form["changes_json"].value()) == {"reservations": {"gone": 4}}
    assert forms.form["groups"].value() == ["research"]
    assert [(r["kind"], r["target"], r["value"]) for r in forms.rows.initial] == [
        ("reservations", "group:vision", "70")
    ]


TOO_LATE = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")


@pytest.mark.parametrize(
    ("fields", "rows", "field", "message"),
    [
        # checked by the form
        ({}, [("reservations", "group:vision", "lots")], "changes-0-value", "To: must be a number"),
        ({}, [("reservations", "group:vision", "1e999999999")], "changes-0-value", "To: must be below"),
        (
            {},
            [("capacities", "group:vision", "8")],
            "changes-0-target",
            "Of: a pool capacity is set on a pool",
        ),
        (
            {},
            [("budgets", "group:agents", "4")],
            "changes-0-period",
            "Budget period: required with budget hours",
        ),
        ({}, [("", "group:agents", "4")], "changes-0-kind", "Change: choose what to change"),
        (
            {},
            [("limits", "group:vision", "100"), ("limits", "group:vision", "110")],
            "changes-1-target",
            "Of: vision is changed twice",
        ),
        ({"changes_json": "{"}, [], "changes_json", "not JSON: Expecting property name"),
        ({"changes_json": '{"capacity": {}}'}, [], "changes_json", "capacity: unknown kind"),
        # the one JSON reader (apps.core.parsers.loads), as on the API: depth, range, storable text
        ({"changes_json": "[" * 100_000}, [], "changes_json", "nested deeper than 64 levels"),
        ({"changes_json": '{"limits": {"vision": 1e999}}'}, [], "changes_json", "out of range"),
        ({"changes_json": '{"limits": {"a\\u0000": 1}}'}, [], "changes_json", "NUL character"),
        (
            {"changes_json": '{"limits": {"vision": 90}}'},
            [("limits", "group:vision", "100")],
            "changes_json",
            "limits.vision: also given in a row above",
        ),
        ({"start": "", "end": ""}, [], "start", "From (UTC): required, or choose a preset period"),
        (
            {"wait_threshold_s": "-1"},
            [],
            "wait_threshold_s",
            "Ensure this value is greater than or equal to 0",
        ),
        # checked by the service (RunError), put back on the field it names
        (
            {},
            [("reservations", "group:vision", "500")],
            "changes-0-value",
            "reservations.vision: 500 GPUs is above the limit of 120 GPUs",
        ),
        (
            {"groups": ["search"]},
            [("reservations", "group:vision", "70")],
            "changes-0-value",
            "reservations.vision: unknown policy",
        ),
        (
            {},
            [("pool_order", "profile:h100-8", "hpc-slurm, mars")],
            "changes-0-value",
            "pool 'mars' is not in the profile's pools",
        ),
        (
            {"changes_json": '{"limits": {"vision": -1}}'},
            [],
            "changes_json",
            "limits.vision: must be >= 0, got -1",
        ),
        ({"end": TOO_LATE}, [], "end", "To (UTC): must not be in the future"),
        ({"end": "2025-01-05T00:00"}, [], "end", "To (UTC): must be later than start"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_saves_nothing(login, fields, rows, field, message):
    client = login("it")
    response = client.post(URL, form(rows, **fields))
    assert response.status_code == 400
    assert escape(message) in response.content.decode()
    forms = response.context["forms"]
    errors = {name: str(e) for name, e in forms.form.errors.items()}
    for i, row in enumerate(forms.rows.forms):
        errors |= {f"changes-{i}-{name}": str(e) for name, e in row.errors.items()}
    assert field in errors, errors
    assert WhatIfRun.objects.count() == 0


def test_the_presets_are_whole_days_and_months_before_now():
    now = datetime(2026, 3, 15, 13, 47, 12, tzinfo=UTC)
    day = datetime(2026, 3, 15, tzinfo=UTC)
    assert preset_period("24h", now) == (
        datetime(2026, 3, 14, 13, 47, tzinfo=UTC),
        datetime(2026, 3, 15, 13, 47, tzinfo=UTC),
    )
    assert preset_period("yesterday", now) == (day - timedelta(days=1), day)
    assert preset_period("7d", now) == (day - timedelta(days=7), day)
    assert preset_period("30d", now) == (day - timedelta(days=30), day)
    assert preset_period("month", now) == (datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC))
    assert RunForms(
        {
            "preset": "month",
            "wait_threshold_s": "0",
            "changes-TOTAL_FORMS": "0",
            "changes-INITIAL_FORMS": "0",
        },
        now=now,
    ).form.is_valid()


@pytest.mark.parametrize(
    "username", ["cio", "finance", "head-language", "lead-pretraining", "dev-pretraining"]
)
def test_everyone_but_it_is_refused(login, username):
    run = WhatIfRun.objects.create(start=START, end=START + timedelta(hours=1))
    client = login(username)
    for url in (
        URL,
        f"{URL}{run.pk}/",
        f"{URL}{run.pk}/status/",
        f"{URL}{run.pk}/csv/",
        f"{URL}?again={run.pk}",
    ):
        assert client.get(url).status_code == 403, url
    assert client.post(URL, form([("reservations", "group:vision", "70")])).status_code == 403
    assert WhatIfRun.objects.count() == 1


def test_more_change_rows_than_a_person_needs_are_refused_with_a_form_error(login):
    """docs/limits.md, forms per request: the what-if form takes at most ``MAX_CHANGE_ROWS`` rows;
    2,000 claimed rows are refused on the rows (it was 22 s of building forms) and nothing runs."""
    from apps.whatif.forms import MAX_CHANGE_ROWS

    client = login("it")
    response = client.post(URL, form() | {"changes-TOTAL_FORMS": "2000"})
    assert response.status_code == 400
    rows = response.context["forms"].rows
    assert f"Please submit at most {MAX_CHANGE_ROWS} forms." in rows.non_form_errors()
    assert len(rows.forms) <= MAX_CHANGE_ROWS
    assert WhatIfRun.objects.count() == 0
