"""Issue 37 part 4: lost GPU-hours per group and reason over a period (``apps.tasks.lost_work``)
and at GET /api/v1/groups/<slug>/lost-work/ for those who see the group's pages."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.tasks.lost_work import by_reason, lost_work
from apps.tasks.models import Task, TaskEvent
from tests.ledger.ledger_data import make_estate

pytestmark = pytest.mark.django_db

NOV = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)


def preempted(estate, group, user, reason, lost, at=NOV):
    task = Task.objects.create(
        user=user, compute_resource=estate.resources[group.slug], gpus=Decimal(2), command="train"
    )
    TaskEvent.objects.create(task=task, at=at, kind="preempted", reason=reason, lost_gpu_hours=Decimal(lost))


@pytest.fixture
def estate():
    e = make_estate()
    alice, bob, carol = e.users["alice"], e.users["bob"], e.users["carol"]
    preempted(e, e.team_a, alice, "reclaim", "1.5")
    preempted(e, e.team_a, alice, "reclaim", "0.25")
    preempted(e, e.team_a, alice, "priority", "2")
    preempted(e, e.team_b, bob, "fair_share", "0.75")
    preempted(e, e.team_c, carol, "reclaim", "9")
    preempted(e, e.team_a, alice, "reclaim", "5", at=datetime(2026, 12, 1, tzinfo=UTC))
    TaskEvent.objects.create(task=Task.objects.first(), at=NOV, kind="canceled", reason="canceled")
    return e


def test_lost_work_per_group_and_reason_sums_the_subtrees_preemptions_in_the_period(estate):
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    lines = lost_work(estate.dept, start, end)
    assert [(x.group, x.reason, x.preemptions, x.gpu_hours) for x in lines] == [
        ("alignment", "fair_share", 1, Decimal("0.75")),
        ("pretraining", "priority", 1, Decimal("2")),
        ("pretraining", "reclaim", 2, Decimal("1.75")),
    ]
    assert by_reason(lines) == {
        "fair_share": Decimal("0.75"),
        "priority": Decimal(2),
        "reclaim": Decimal("1.75"),
    }


def test_lost_work_api_for_who_sees_the_group(client, estate):
    client.force_login(estate.users["head"])
    answer = client.get(f"/api/v1/groups/{estate.dept.slug}/lost-work/?period=2026-11").json()
    assert answer["gpu_hours"] == "4.500000"
    assert answer["by_reason"] == {"fair_share": "0.750000", "priority": "2.000000", "reclaim": "1.750000"}
    assert [line["group"] for line in answer["lines"]] == ["alignment", "pretraining", "pretraining"]
    client.force_login(estate.users["lead"])
    team = client.get(f"/api/v1/groups/{estate.team_a.slug}/lost-work/?period=2026-12").json()
    assert team["by_reason"] == {"reclaim": "5.000000"}
    assert client.get(f"/api/v1/groups/{estate.team_a.slug}/lost-work/?period=soon").status_code == 400
    client.force_login(estate.users["carol"])
    assert client.get(f"/api/v1/groups/{estate.team_a.slug}/lost-work/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_lost_work_on_the_command_line(live_server, tmp_path, estate):
    import json

    from tests.channels.conftest import token_for
    from tests.channels.live import klique, logged_in

    env = logged_in(tmp_path, live_server.url, token_for(estate.users["head"]))
    shown = klique(env, "lost-work", estate.dept.slug, "--period", "2026-11")
    assert shown.returncode == 0, shown.stderr
    assert "4.5 GPU-hours" in shown.stdout and "fair_share" in shown.stdout, shown.stdout
    found = json.loads(klique(env, "lost-work", estate.dept.slug, "--period", "2026-11", "--json").stdout)
    assert found["by_reason"]["reclaim"] == "1.750000"
    assert klique(env, "lost-work", estate.team_c.slug).returncode == 4
