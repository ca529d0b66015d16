"""Readable numbers and honest tables (issue 20): the words of the reference instead of raw codes,
each filter showing its current value, no "[invalid name]" or "Unknown", a weight-0 compute
resource exempt from a used-up budget, empty charts as a sentence, and two units never on one
axis."""

import json
import re
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.models import Notification, User
from apps.ledger.admin_policies import ResourcePolicyAdmin
from apps.policies import services as policies
from apps.policies.models import ResourcePolicy
from apps.portal import charts
from apps.tasks.models import TaskEvent
from tests.factories import ComputeResourceFactory, ProfileFactory
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db


def text_of(html: str) -> str:
    """The page's visible text: no tags, scripts or attribute values."""
    html = re.sub(r"<script.*?</script>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def selected(html: str, name: str) -> list[str]:
    """The values of the options selected in the select named ``name``."""
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, flags=re.S)
    assert select, f"no select {name}"
    return re.findall(r'<option value="([^"]*)"[^>]*\bselected\b', select.group(1))


def test_the_notifications_filter_names_its_fields(login):
    user = User.objects.get(username="dev-agents")
    Notification.objects.create(user=user, kind=Notification.Kind.BUDGET_USED_UP, message="Agents is out")
    page = login("dev-agents").get("/notifications/").content.decode()
    assert "[invalid" not in page
    assert "Read or unread" in page
    assert 'title="A time or money budget is used up' in page and "Budget used up" in text_of(page)
    assert "budget_used_up" not in text_of(page)


@pytest.mark.parametrize("username", ["it", "finance"])
def test_the_admin_is_titled_for_everyone_and_its_names_are_english(login, username):
    page = login(username).get("/admin/").content.decode()
    assert "IT console" not in page and "Klique admin" in page
    if username == "it":
        assert "Engine switches" in page and "switchs" not in page


def test_the_resource_policy_list_fits_its_columns(login):
    assert len(ResourcePolicyAdmin.list_display) <= 10
    page = login("it").get("/admin/policies/resourcepolicy/").content.decode()
    assert "klique/admin.css" in page and "Time budget (h)" in page


def test_the_work_waiting_filter_defaults_to_any_and_keeps_its_choice(login):
    client = login("it")
    page = client.get("/it/").content.decode()
    assert "Unknown" not in page
    assert selected(page, "q-waiting_only") == [""]
    page = client.get("/it/?q-waiting_only=yes").content.decode()
    assert selected(page, "q-waiting_only") == ["yes"]


def test_the_report_selects_what_it_shows_and_keeps_it(login):
    client = login("finance")
    page = client.get("/reports/").content.decode()
    assert selected(page, "period") == ["month"] and selected(page, "by") == ["group"]
    assert selected(page, "currency") == ["EUR"]
    page = client.get("/reports/?period=week&by=pool").content.decode()
    assert selected(page, "period") == ["week"] and selected(page, "by") == ["pool"]


def test_event_reasons_and_verdicts_are_in_words_with_an_explanation(login):
    task = submit("dev-agents", "agents/gpu-flex", gpus="1")
    now = timezone.now()
    TaskEvent.objects.create(task=task, at=now, kind=TaskEvent.Kind.VERDICT, reason="budget_used_up")
    TaskEvent.objects.create(task=task, at=now, kind=TaskEvent.Kind.REQUEUED, reason="budget")
    page = login("dev-agents").get(f"/work/tasks/{task.pk}/").content.decode()
    shown = text_of(page)
    assert "budget used up" in shown and "Budget used up" in shown
    assert "budget_used_up" not in shown and not re.search(r"\bbudget\b(?! (used|hours|of|per))", shown)
    assert 'title="A time or money budget of its policy or one above it is used up until the reset."' in page


def test_a_weight_0_compute_resource_is_exempt_from_a_used_up_budget(login):
    agents = ResourcePolicy.objects.get(group__slug="agents")
    policies.update_policy(agents, budget_hours=0)
    ComputeResourceFactory(name="agents/free", policy=agents, profile=ProfileFactory(time_weight=Decimal(0)))
    page = login("dev-agents").get("/work/").content.decode()
    assert "exempt (time weight 0)" in page
    assert "over budget until" in page  # its weighted resources are held
    row = re.search(r"<tr[^>]*>\s*<td[^>]*>agents/free</td>.*?</tr>", page, flags=re.S).group(0)
    assert "over budget" not in row


def test_a_used_up_budget_shows_used_up_not_a_negative_figure(login):
    policies.update_policy(ResourcePolicy.objects.get(group__slug="agents"), budget_hours=0)
    page = login("it").get("/it/").content.decode()
    assert "used up" in text_of(page)
    assert not re.search(r">\s*-0[.,]", page)


def test_an_empty_chart_is_a_sentence(login):
    page = login("it").get("/it/").content.decode()
    assert "No GPUs are waiting: every compute resource&#x27;s queue is empty." in page
    assert 'id="queue-waiting"' not in page


def test_gpu_hours_and_money_get_an_axis_each():
    chart = charts.bars(
        "mixed",
        "GPU-hours and cost",
        ["A100"],
        {"GPU-hours": [Decimal("10")]},
        y_title="GPU-hours",
        secondary={"cost (EUR)": [Decimal("21")]},
        y2_title="EUR",
    )
    figure = json.loads(re.search(r"<script[^>]*>(.*)</script>", str(chart.html), flags=re.S).group(1))
    axes = {trace["name"]: trace.get("yaxis", "y") for trace in figure["data"]}
    assert axes == {"GPU-hours": "y", "cost (EUR)": "y2"}
    assert figure["layout"]["yaxis"]["title"]["text"] == "GPU-hours"
    assert figure["layout"]["yaxis2"]["title"]["text"] == "EUR"
    assert figure["layout"]["yaxis2"]["overlaying"] == "y"


def test_a_chart_of_zeros_is_a_sentence():
    chart = charts.bars("none", "Nothing", ["a", "b"], {"waiting": [0, 0]}, empty="Nobody waits.")
    assert chart.empty and 'class="chart-empty">Nobody waits.</p>' in str(chart.html)
