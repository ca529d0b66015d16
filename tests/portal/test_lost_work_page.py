"""Work lost to preemptions on the team and department pages (issue 37 part 4): the GPU-hours each
preemption of the month lost, per group of the subtree and reason, for those who see the group."""

from decimal import Decimal

import pytest
from django.utils import timezone

from apps.tasks.models import Task, TaskEvent
from tests.ledger.ledger_data import make_estate

pytestmark = pytest.mark.django_db


def preempted(estate, group, reason: str, lost: str) -> None:
    task = Task.objects.create(
        user=estate.users["alice"], compute_resource=estate.resources[group.slug], gpus=1, command="train"
    )
    TaskEvent.objects.create(
        task=task, at=timezone.now(), kind="preempted", reason=reason, lost_gpu_hours=Decimal(lost)
    )


def test_lost_work_per_group_and_reason_on_the_team_and_department_pages(client):
    estate = make_estate()
    preempted(estate, estate.team_a, "reclaim", "1.5")
    preempted(estate, estate.team_a, "reclaim", "0.25")
    preempted(estate, estate.team_b, "priority", "2")
    client.force_login(estate.users["lead"])
    page = client.get(f"/teams/{estate.team_a.slug}/").content.decode()
    assert 'id="lost-work-table"' in page
    assert "<td>Pretraining</td><td>Reclaimed for a reservation</td><td>2</td><td>1.8</td>" in page
    assert "Alignment" not in page.split('id="lost-work-table"')[1].split("</table>")[0]
    client.force_login(estate.users["head"])
    page = client.get(f"/departments/{estate.dept.slug}/").content.decode()
    table = page.split('id="lost-work-table"')[1].split("</table>")[0]
    assert (
        "<td>Alignment</td><td>Preempted for a higher-priority task of its own group</td><td>1</td><td>2</td>"
        in table
    )
    assert "<td>Pretraining</td><td>Reclaimed for a reservation</td><td>2</td><td>1.8</td>" in table
    client.force_login(estate.users["lead"])
    page = client.get(f"/teams/{estate.team_b.slug}/")
    assert page.status_code in (403, 404)
