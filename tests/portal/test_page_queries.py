"""Each role's main page reads the estate in a number of queries that does not grow with it (more
groups, tasks, usage and table rows: the same count), and the leadership's daily history reads a
fortnight in the queries of one report, with the figures of a report per day."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from apps.engine.services import run_pass
from apps.ledger import rollups
from apps.ledger.budgets import budget_status
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import daily_reports, usage_report
from apps.policies import services as policies
from apps.policies.models import ComputeResource, Profile, ResourcePolicy
from apps.portal.selectors import budget_holds, holds_over
from apps.pricing import services as pricing
from apps.tasks import services as tasks
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

MAIN_PAGES = {
    "cio": "/leadership/",
    "it": "/it/",
    "finance": "/finance/",
    "head-language": "/departments/language/",
    "tenant-vision": "/tenants/vision/",
    "lead-pretraining": "/teams/pretraining/",
    "dev-pretraining": "/work/",
}


def grow(teams: int, per_resource: int) -> None:
    """``teams`` more teams (a policy, a compute resource, a member, a project each), then
    ``per_resource`` tasks on every team's compute resources, placed and half of them ended."""
    departments = list(Group.objects.filter(kind=Group.Kind.DEPARTMENT).order_by("slug"))
    flex = Profile.objects.get(name="gpu-flex")
    start = Group.objects.filter(slug__startswith="extra-").count()
    for i in range(start, start + teams):
        team = accounts.create_group(
            name=f"Extra {i}",
            slug=f"extra-{i}",
            kind=Group.Kind.TEAM,
            parent=departments[i % len(departments)],
        )
        policies.connect(policy=policies.create_policy(group=team, reservation=0, limit=8), profile=flex)
        accounts.add_membership(
            user=User.objects.create(username=f"extra-{i}", password="!"), group=team, role="member"
        )
        accounts.create_project(group=team, name=f"extra-{i}")
    members = {}
    for m in Membership.objects.filter(role=Membership.Role.MEMBER).select_related("user").order_by("pk"):
        members.setdefault(m.group_id, m.user)
    for resource in ComputeResource.objects.select_related("policy", "profile").order_by("pk"):
        user = members.get(resource.policy.group_id)
        for n in range(per_resource if user else 0):
            sized = {"gpus": "1"} if resource.profile.size_from_task else {}
            tasks.submit(
                user=user, compute_resource=resource, command=f"sleep {n}", channel="portal", **sized
            )
    run_pass()
    for task in tasks_running()[::2]:
        tasks.finish(task, exit_code=0, at=task.placed_at + timedelta(seconds=1))
    run_pass()
    rollups.refresh()


def tasks_running():
    from apps.tasks.models import Task

    return list(Task.objects.filter(state__in=Task.ACTIVE_STATES).order_by("pk"))


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_each_roles_main_page_takes_as_many_queries_with_three_times_the_groups_and_tasks(login):
    grow(teams=4, per_resource=2)
    small = {user: queries(login(user), url) for user, url in MAIN_PAGES.items()}
    grow(teams=8, per_resource=4)
    assert Group.objects.count() == 15 + 12
    big = {user: queries(login(user), url) for user, url in MAIN_PAGES.items()}
    assert big == small
    assert max(big.values()) <= 90, big


def test_the_action_columns_draw_their_forms_with_the_pages_csrf_token_and_no_query_per_row(login):
    grow(teams=0, per_resource=3)
    page = login("dev-pretraining").get("/work/").content.decode()
    assert page.count('name="csrfmiddlewaretoken" value="') >= 3
    assert 'name="csrfmiddlewaretoken" value=""' not in page


@pytest.fixture
def fortnight():
    """Usage over a fortnight around a price change, across midnights, one interval still running,
    and rollups built to the middle of the last day, so the reading takes every path (daily and
    hourly rollups, the intervals after them)."""
    estate = make_estate()
    u = estate.users
    first = datetime(2026, 4, 3, tzinfo=UTC)
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="3", effective_from=date(2026, 4, 9), via="system"
    )
    pricing.create_price(
        gpu_type=estate.h100, per_gpu_hour="4", effective_from=date(2026, 1, 1), via="system"
    )
    for n in range(14):
        at = first + timedelta(days=n, hours=20 + n % 3)
        record(estate, estate.team_a, u["alice"], estate.onprem, at, at + timedelta(hours=5), gpus="2")
        record(estate, estate.team_c, u["carol"], estate.cloud, at, at + timedelta(minutes=50), gpus="1")
    now = first + timedelta(days=13, hours=15, minutes=20)
    record(estate, estate.team_b, u["bob"], estate.onprem, now - timedelta(hours=30), None, gpus="0.25")
    rollups.refresh(now - timedelta(hours=3))
    return estate, first, now


@pytest.mark.parametrize("viewer", ["fin", "head", "alice"])
@pytest.mark.parametrize("dims", [("group",), ("pool",), ("user",), ("group", "gpu_type")])
def test_daily_reports_give_each_days_usage_report_in_the_queries_of_one(fortnight, viewer, dims):
    estate, first, now = fortnight
    person = estate.users[viewer]
    spec = ReportSpec(dims, first, first + timedelta(days=14), "EUR")
    with CaptureQueriesContext(connection) as captured:
        days = daily_reports(person, spec, now)
    assert len(captured.captured_queries) <= 25
    for n, day in enumerate(days):
        one = ReportSpec(dims, first + timedelta(days=n), first + timedelta(days=n + 1), "EUR")
        alone = usage_report(person, one, now)
        assert day.spec == one and day.stop == alone.stop
        assert [(r.key, r.labels, r.figures) for r in day.rows] == [
            (r.key, r.labels, r.figures) for r in alone.rows
        ]
        assert (day.total, day.unpriced) == (alone.total, alone.unpriced)
    assert sum(d.total.gpu_us for d in days) == usage_report(person, spec, now).total.gpu_us > 0


def test_holds_over_some_policies_are_those_of_every_policys_budget_status_reading_fewer_intervals(estate):
    grow(teams=2, per_resource=1)
    ResourcePolicy.objects.filter(group__slug__in=["agents", "language"]).update(budget_hours=0)
    policies = dict(ResourcePolicy.objects.values_list("group__slug", "pk"))
    asked = {policies[slug] for slug in ("agents", "pretraining", "ranking", "extra-0")}
    every = budget_holds(budget_status())
    assert holds_over(asked) == {pk: at for pk, at in every.items() if pk in asked}
    assert set(holds_over(asked)) == {policies["agents"], policies["pretraining"]}
