"""Charts show small used amounts against large limits (docs/portal.md, "Charts"): the used figures
are bars of their own, labelled, the limits markers, and the y axis logarithmic when a used bar
would be too small to see (12 budget hours used of 24,000). Asserted on the plotly figure's data."""

import json
import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.accounts.models import User
from apps.pools.models import Pool
from apps.portal import charts
from tests.factories import WorkerFactory
from tests.portal.test_finance_cloud import held

NOW = datetime(2026, 4, 15, 12, 30, tzinfo=UTC)


def figure_of(html: str, chart_id: str) -> dict:
    found = re.search(rf'<script id="{chart_id}-figure" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def traces(figure: dict) -> dict[str, dict]:
    return {trace["name"]: trace for trace in figure["data"]}


def test_small_used_hours_beside_a_large_budget_are_a_labelled_bar_of_their_own_on_a_log_axis():
    chart = charts.against(
        "hours",
        "Hours per team",
        ["Pretraining", "Alignment"],
        {"budget hours used": [Decimal("12"), Decimal("7000")]},
        {"budget": [Decimal("24000"), Decimal("8000")]},
        y_title="hours",
        figure_of=charts.HOURS,
    )
    figure = figure_of(str(chart.html), "hours")
    used, budget = traces(figure)["budget hours used"], traces(figure)["budget"]
    assert (used["type"], used["y"], used["text"], used.get("visible", True)) == (
        "bar",
        [12.0, 7000.0],
        ["12", "7,000"],
        True,
    )
    assert (budget["type"], budget["mode"], budget["y"]) == ("scatter", "markers", [24000.0, 8000.0])
    assert figure["layout"]["yaxis"]["type"] == "log"
    assert figure["layout"]["yaxis"]["title"]["text"] == "hours (log scale)"


def test_use_near_its_limit_keeps_a_linear_axis_and_a_team_without_a_limit_has_no_marker():
    chart = charts.against(
        "gpus", "GPUs", ["A", "B"], {"in use": [10, 12]}, {"limit": [16, None]}, y_title="GPUs"
    )
    figure = figure_of(str(chart.html), "gpus")
    assert traces(figure)["in use"]["y"] == [10.0, 12.0]
    assert traces(figure)["limit"]["y"] == [16.0, None]
    assert "type" not in figure["layout"].get("yaxis", {})


def test_nothing_used_and_no_limit_is_a_sentence():
    chart = charts.against("none", "GPUs", ["A"], {"in use": [0]}, {"limit": [None]}, empty="Nothing in use.")
    assert chart.empty and "Nothing in use." in str(chart.html)


@pytest.mark.django_db
def test_the_department_page_shows_a_teams_12_used_hours_beside_its_24000_hour_budget(
    estate, client, time_machine
):
    """The issue's case: Pretraining's monthly budget is 24,000 hours and it used 12."""
    time_machine.move_to(NOW, tick=False)
    worker = WorkerFactory(pool=Pool.objects.get(name="hpc-slurm"))
    held(
        worker,
        "pretraining/h100-8",
        "1",
        datetime(2026, 4, 15, 0, tzinfo=UTC),
        datetime(2026, 4, 15, 12, tzinfo=UTC),
    )
    client.force_login(User.objects.get(username="head-language"))
    figure = figure_of(client.get("/departments/language/").content.decode(), "team-hours")
    used, budget = traces(figure)["budget hours used"], traces(figure)["budget"]
    row = used["x"].index("Pretraining")
    assert (used["type"], used["y"][row], used["text"][row]) == ("bar", 12.0, "12")
    assert budget["y"][row] == 24000.0
    assert figure["layout"]["yaxis"]["type"] == "log"
    assert "budget hours left" not in traces(figure)
