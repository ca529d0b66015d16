"""The demo's work names its teams' projects (apps/portal/demo.py ``project_picker``), so "by group
and project" reports and a team lead's project table have figures, not "(no project)" and 0 h."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db.models import F

from apps.accounts.models import Group, User
from apps.accounts.selectors import cost_centres
from apps.engine import services as engine
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.portal import demo
from apps.portal.demo_load import DemoLoad
from apps.portal.usage import team_projects
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def test_demo_work_is_submitted_with_the_teams_projects_and_reports_show_them():
    demo.seed()
    load = DemoLoad()
    with time_machine.travel(START, tick=False) as clock:
        for second in range(0, 5 * 60, 10):
            now = START + timedelta(seconds=second)
            clock.move_to(now)
            load.tick(second)
            engine.run_pass(now=now)
    end = START + timedelta(hours=1)
    submitted = Task.objects.all()
    assert submitted.count() > 50
    assert not submitted.filter(project__isnull=True).exists()
    assert not submitted.exclude(project__group=F("compute_resource__policy__group")).exists()
    pretraining = Group.objects.get(slug="pretraining")
    lead = User.objects.get(username="lead-pretraining")
    used = {p.project.name: p.gpu_hours for p in team_projects(lead, pretraining, START, end)}
    assert set(used) == {"llm-7b", "llm-70b"} and all(hours > 0 for hours in used.values()), used
    spec = ReportSpec(dims=("group", "project"), start=START, end=end, currency="EUR")
    report = usage_report(User.objects.get(username="finance"), spec, now=START + timedelta(minutes=5))
    projects = {row.labels["project"] for row in report.rows}
    assert "(no project)" not in projects and len(projects) >= 5, projects


def test_the_demo_groups_carry_cost_centres_that_teams_inherit():
    demo.seed()
    codes = {Group.objects.get(pk=pk).slug: code for pk, code in cost_centres().items()}
    assert codes["acme"] == ""
    assert codes["research"] == codes["vision"] == codes["perception"] == "CC-4100"
    assert codes["language"] == codes["pretraining"] == "CC-4130"
    assert codes["products"] == codes["agents"] == "CC-4200"
