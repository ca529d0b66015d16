"""Issue 36's rough edges, each by name: numbers outside the tables (change requests, the split
form, notifications, admin lists, prices, exports, plurals), raw codes (the CLI's "why waiting",
the admin's "waits because"), the run-out the CLI and the portal agree on, and small traps (the
statement form's group, who acted in a task's history, a what-if's change labels)."""

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from apps.accounts.models import Notification, User
from apps.engine.verdict_words import RULE_WORDS
from apps.governance import services as governance
from apps.ledger import exports
from apps.ledger.budgets import BudgetStatus
from apps.ledger.models import BudgetAlert
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.policies.models import ResourcePolicy
from apps.pricing import services as pricing
from apps.pricing.tables import PriceTable
from apps.tasks.models import TaskEvent
from apps.whatif.tables import describe
from klique.client.cli.tasks import task_text
from klique.client.sdk.tasks import Task
from tests.factories import GpuTypeFactory, PoolFactory, ProfileFactory, UserFactory
from tests.ledger.ledger_data import make_estate, record
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

TRAILING_ZEROS = re.compile(r"\b\d+\.\d*0\b")


def person(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def admin() -> Client:
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


# -- numbers outside the tables --------------------------------------------------------------


def test_the_change_request_page_writes_the_asked_values_as_numbers_without_trailing_zeros(estate):
    request = governance.file_request(
        requester=User.objects.get(username="lead-pretraining"),
        group=ResourcePolicy.objects.get(group__slug="pretraining").group,
        reservation=Decimal("56"),
        limit=Decimal("190"),
        justification="A 70B run.",
    )
    page = person("head-language").get(f"/requests/{request.pk}/").content.decode()
    assert "reservation 56 GPUs; limit 190 GPUs" in page
    assert "56.000" not in page and "190.000" not in page
    listing = person("head-language").get("/requests/").content.decode()
    assert "reservation 56 GPUs; limit 190 GPUs" in listing


def test_the_split_forms_initial_values_have_no_trailing_zeros(login):
    page = login("head-language").get("/departments/language/split/").content.decode()
    pretraining = ResourcePolicy.objects.get(group__slug="pretraining")
    assert f'name="p{pretraining.pk}-reservation" value="48"' in page
    assert f'name="p{pretraining.pk}-limit" value="160"' in page
    assert "48.000" not in page and "160.000" not in page


def test_a_budget_notification_writes_its_hours_as_the_portal_does(estate):
    from apps.engine.services import _send_alert

    policy = ResourcePolicy.objects.select_related("group").get(group__slug="pretraining")
    now = datetime(2026, 4, 10, tzinfo=UTC)
    status = BudgetStatus(
        policy_id=policy.pk,
        has_budget=True,
        period="month",
        period_start=datetime(2026, 4, 1, tzinfo=UTC),
        resets_at=datetime(2026, 5, 1, tzinfo=UTC),
        budget_hours=Decimal("2000.000"),
        used_hours=Decimal("2004.000"),
        left_hours=Decimal("-4.000"),
        burn_rate=Decimal("0"),
        projected_run_out=None,
        alert_threshold=80,
        used_up=True,
        gpu_hours=Decimal("2004"),
        gpus_in_use=Decimal("0"),
    )
    assert _send_alert(policy, status, BudgetAlert.Kind.USED_UP, now)
    message = Notification.objects.filter(kind=Notification.Kind.BUDGET_USED_UP).first().message
    assert "has used 2,004 of its 2,000 budget hours" in message
    assert not TRAILING_ZEROS.search(message)


def test_admin_lists_write_gpus_and_weights_without_trailing_zeros(estate):
    PoolFactory(name="rough-pool", capacity=Decimal("16"))
    ProfileFactory(name="rough-quarter", gpus=Decimal("0.250"), time_weight=Decimal("0.250"))
    client = admin()
    pools = client.get("/admin/pools/pool/?q=rough").content.decode()
    profiles = client.get("/admin/policies/profile/?q=rough").content.decode()
    assert ">16<" in pools and "16.000" not in pools
    assert ">0.25<" in profiles and "0.250" not in profiles


def test_prices_show_the_decimals_they_have_not_four(estate):
    gpu_type = GpuTypeFactory(name="R100")
    price = pricing.create_price(
        gpu_type=gpu_type, per_gpu_hour=Decimal("2.1000"), effective_from=date(2026, 1, 1), via="system"
    )
    assert str(price) == "R100 €2.10/GPU-hour from 2026-01-01"
    table = PriceTable([price], exclude=("actions",))
    assert table.rows[0].get_cell("per_gpu_hour") == "€2.10"
    assert table.rows[0].get_cell_value("per_gpu_hour") == "2.1000"


def test_a_usage_export_writes_each_column_in_one_format():
    estate = make_estate()
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="1", effective_from=date(2026, 1, 1), via="system"
    )
    day = datetime(2026, 4, 10, tzinfo=UTC)
    u = estate.users
    record(estate, estate.team_a, u["alice"], estate.onprem, day, day + timedelta(hours=12), gpus="4")
    spec = ReportSpec(
        dims=("group",), start=day, end=day + timedelta(days=1), currency="EUR", idle="separate"
    )
    report = usage_report(u["fin"], spec, now=datetime(2026, 5, 10, tzinfo=UTC))
    rows = list(csv.reader(io.StringIO(exports.csv_text(exports.table(report)))))
    header, body = rows[0], rows[1:]
    for title, places in (("GPU-hours", 3), (f"Cost ({spec.currency})", 2)):
        cells = [row[header.index(title)] for row in body if row[header.index(title)]]
        assert cells and all(re.fullmatch(rf"-?\d+\.\d{{{places}}}", cell) for cell in cells), (title, cells)


def test_a_one_gpu_task_page_says_gpu_not_gpus(login):
    task = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1")
    page = login("dev-pretraining").get(f"/work/tasks/{task.pk}/").content.decode()
    assert "(1 GPU)" in page and "(1 GPUs)" not in page


# -- raw codes -------------------------------------------------------------------------------


def cli_task(**fields) -> Task:
    data = {
        "id": 7,
        "name": "",
        "user": "vera",
        "compute_resource": "vision/a100",
        "group": "vision",
        "profile": "a100",
        "project": None,
        "gpus": "1.000",
        "command": "train",
        "channel": "cli",
        "state": "queued",
        "pool": None,
        "queue_position": 1,
        "checkpoint": False,
        "preemption_count": 0,
        "last_preemption_reason": "",
        "stop_reason": "",
        "exit_code": None,
        "submitted_at": "2026-04-10T00:00:00+00:00",
        "placed_at": None,
        "started_at": None,
        "ended_at": None,
    }
    return Task.from_api(data | fields)


def test_klique_status_says_why_a_task_waits_in_words_not_its_rule_code():
    message = "vision is at its limit: this task would take it above the most GPUs it may hold at once."
    text = task_text(cli_task(verdict={"rule": "policy_limit", "message": message}))
    assert f"  why waiting       {message}" in text
    assert "policy_limit" not in text


def test_the_admins_waits_because_filter_lists_the_rules_in_words(estate):
    page = admin().get("/admin/tasks/task/").content.decode()
    assert RULE_WORDS["budget_used_up"][0] in page and RULE_WORDS["ancestor_limit"][0] in page
    assert ">budget_used_up<" not in page and ">ancestor_limit<" not in page


# -- the run-out -----------------------------------------------------------------------------


def test_klique_budget_and_the_portal_say_lasts_until_reset_for_a_run_out_after_the_reset(estate):
    from apps.ledger.api.budgets import _run_out
    from klique.client.cli.usage import cmd_budget
    from klique.client.sdk.usage import Usage

    status = BudgetStatus(
        policy_id=1,
        has_budget=True,
        period="month",
        period_start=datetime(2026, 12, 1, tzinfo=UTC),
        resets_at=datetime(2027, 1, 1, tzinfo=UTC),
        budget_hours=Decimal("100"),
        used_hours=Decimal("10"),
        left_hours=Decimal("90"),
        burn_rate=Decimal("0.1"),
        projected_run_out=datetime(2027, 1, 9, tzinfo=UTC),
        alert_threshold=80,
        used_up=False,
        gpu_hours=Decimal("10"),
        gpus_in_use=Decimal("1"),
    )
    words = _run_out(status)
    assert words["run_out"] == "lasts until reset 2027-01-01 00:00 UTC" == status.run_out_text()
    assert words["runs_out_in_period"] is False

    class Args:
        json = False

    class Server:
        def usage(self):
            api = {
                "policy_id": 1,
                "group": {"slug": "vision", "name": "Vision"},
                "reservation": "1",
                "limit": "2",
                "gpus_in_use": "1",
                "gpu_hours": "10",
                "has_budget": True,
                "period": "month",
                "period_start": "2026-12-01T00:00:00+00:00",
                "resets_at": "2027-01-01T00:00:00+00:00",
                "budget_hours": "100",
                "used_hours": "10",
                "left_hours": "90",
                "burn_rate": "0.1",
                "projected_run_out": "2027-01-09T00:00:00+00:00",
                "alert_threshold": 80,
                "over_threshold": False,
                "used_up": False,
                **words,
            }
            return [Usage.from_api(api)]

    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cmd_budget(Args(), Server())
    assert "lasts until reset 2027-01-01 00:00 UTC" in out.getvalue()
    assert "2027-01-09" not in out.getvalue()


def test_the_usage_api_gives_the_run_out_in_the_portals_words(estate):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(User.objects.get(username="lead-pretraining"))
    rows = client.get("/api/v1/usage/").json()
    budgeted = [row for row in rows if row["has_budget"]]
    assert budgeted and all(row["run_out"] for row in budgeted)
    assert all(isinstance(row["runs_out_in_period"], bool) for row in budgeted)
    assert all(w["run_out"] for row in budgeted for w in row["windows"])


# -- small traps -----------------------------------------------------------------------------


def test_the_statement_form_chooses_the_viewers_own_group_so_pdf_at_once_gives_a_statement(estate):
    page = person("lead-pretraining").get("/reports/statements/").content.decode()
    assert '<option value="pretraining" selected>' in page
    assert '<option value="">—</option>' not in page


def test_a_claimed_event_in_a_tasks_history_names_the_worker_not_the_engine(login):
    task = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1")
    TaskEvent.objects.create(
        task=task,
        at=task.submitted_at + timedelta(seconds=5),
        kind=TaskEvent.Kind.CLAIMED,
        detail={"worker": "gpu-node-7", "worker_id": 1},
    )
    page = login("dev-pretraining").get(f"/work/tasks/{task.pk}/").content.decode()
    claimed = page[page.index("Claimed by a worker") :][:400]
    assert "worker gpu-node-7" in claimed and "engine" not in claimed


def test_a_whatif_change_is_labelled_with_the_groups_name_and_its_figures_as_people_read_them():
    lines = describe(
        {"limits": {"pretraining": "190.000"}, "budgets": {"pretraining": [{"hours": 1, "period": "day"}]}},
        {"pretraining": "Pretraining"},
    )
    assert lines == [("Limit of Pretraining (GPUs)", "190"), ("Budget of Pretraining", "1 hour a day")]
