"""Where people see fair sharing and priority in the portal: a department lending fairly shows each
team's borrowed GPUs against its fair share (one formatter, ``klique.numbers``); a department
lending by queuing priority shows no such column; a developer's task page shows the task's priority
with its class's name, and while it waits why, in the engine's words."""

import pytest

from apps.accounts.models import Membership
from apps.policies.models import PriorityClass
from apps.tasks.models import Task
from tests.factories import UserFactory
from tests.fair_estate import fair_estate

pytestmark = pytest.mark.django_db


def head_of(estate, client):
    head = UserFactory(username="head-vision")
    Membership.objects.create(user=head, group=estate.department.group, role=Membership.Role.DEPARTMENT_HEAD)
    client.force_login(head)
    return client


def test_a_fair_department_shows_each_teams_borrowed_gpus_against_its_fair_share(client):
    estate = fair_estate()
    page = head_of(estate, client).get("/departments/vision/").content.decode()
    assert "Fair share" in page
    assert "20 of fair 10 borrowed GPUs" in page and "above its share" in page
    assert "0 of fair 30 borrowed GPUs" in page
    assert "fair share: the GPUs the teams borrow" in page


def test_the_fair_share_is_exported_exactly(client):
    estate = fair_estate()
    csv = head_of(estate, client).get("/departments/vision/", {"export": "csv", "table": "teams"})
    rows = csv.content.decode().splitlines()
    assert "Fair share" in rows[0]
    column = rows[0].split(",").index("Fair share")
    assert sorted(row.split(",")[column] for row in rows[1:]) == ["10.000", "30.000"]


def test_a_department_lending_by_queuing_priority_shows_no_fair_share(client):
    estate = fair_estate(lending="priority")
    page = head_of(estate, client).get("/departments/vision/").content.decode()
    assert "Fair share" not in page and "of fair" not in page
    assert "queuing priority: the first in the queuing order borrows first" in page


def test_a_task_page_shows_its_priority_with_its_class_name_and_why_it_waits(client):
    estate = fair_estate()
    PriorityClass.objects.update_or_create(value=200, defaults={"name": "high"})
    message = "Mapping holds 0 of its fair 30 borrowed GPUs."
    estate.waiting.verdict = {"rule": "fair_share", "message": message}
    estate.waiting.save(update_fields=["verdict"])
    client.force_login(estate.user)
    page = client.get(f"/work/tasks/{estate.waiting.pk}/").content.decode()
    assert '<dd id="task-priority">200 (high)</dd>' in page
    assert f'<dd id="task-verdict">{message}</dd>' in page


def test_a_priority_without_a_class_shows_the_number_alone(client):
    estate = fair_estate()
    Task.objects.filter(pk=estate.waiting.pk).update(priority=150)
    client.force_login(estate.user)
    page = client.get(f"/work/tasks/{estate.waiting.pk}/").content.decode()
    assert '<dd id="task-priority">150</dd>' in page
