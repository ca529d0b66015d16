"""The export of a recorded period with issue 35's work (docs/whatif.md, "Export"): time limits on
the profile and the tasks, dependencies as ``after_ok`` / ``after_any``, a capped array as one
``array`` submit; the simulator replays it with the recorded decisions."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.engine import export, export_fidelity, services
from apps.engine.core import scenario as scenarios
from apps.engine.core.simulation import Simulation
from apps.policies import services as policies
from apps.tasks import services as tasks
from apps.tasks.models import Task
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory, WorkerFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def fresh(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def record() -> dict:
    """a (limit 30 s) runs and times out at 30: b (after_ok a) is canceled, c (after_any a) starts;
    an array of 3 with max_running 1 runs one task at a time, 40 s each."""
    pool = PoolFactory(name="onprem", capacity=4)
    profile = ProfileFactory(name="gpu1", gpus=1, time_weight=1, starvation_s=None)
    policies.link_pool(profile, pool)
    profile.max_time_limit_s = 3600
    profile.save()
    policy = policies.create_policy(group=GroupFactory(name="Team", slug="team"), reservation=4, limit=4)
    resource = policies.connect(policy=policy, profile=profile, name="team/gpu1")
    user = UserFactory(username="scenario")
    worker = WorkerFactory(pool=pool, gpus=4)
    with time_machine.travel(at(0), tick=False):
        a = tasks.submit(user=user, compute_resource=resource, command="a", time_limit_s=30)
        b = tasks.submit(user=user, compute_resource=resource, command="b", after_ok=[a.pk])
        c = tasks.submit(user=user, compute_resource=resource, command="c", after_any=[a.pk])
        array = tasks.submit_array(user=user, size=3, max_running=1, compute_resource=resource, command="x")
        services.run_pass(now=at(0))
        tasks.claim_many(worker, [fresh(a)], at(0))
        tasks.mark_started(fresh(a), at(0))
    running = {task.pk: 0 for task in array if fresh(task).state == Task.State.PLACED}
    for second in range(1, 130):
        with time_machine.travel(at(second), tick=False):
            for pk, since in list(running.items()):
                if second - since >= 40:
                    tasks.finish(Task.objects.get(pk=pk), exit_code=0, at=at(second))
                    del running[pk]
            if fresh(a).state == Task.State.STOPPING:
                tasks.stopped_many([fresh(a)], at(second))
            services.run_pass(now=at(second))
            for task in array:
                if fresh(task).state == Task.State.PLACED and task.pk not in running:
                    running[task.pk] = second
    return {"a": a, "b": b, "c": c, "array": array}


def test_time_limits_dependencies_and_a_capped_array_are_exported_and_replayed():
    made = record()
    a, b, c, array = made["a"], made["b"], made["c"], made["array"]
    assert fresh(a).state == Task.State.TIMED_OUT and fresh(b).stop_reason == "dependency_failed"
    data = export.export(T0, at(200))
    assert data["profiles"][0]["max_time_limit_s"] == 3600
    submits = {e["submit"]["id"]: e for e in data["events"] if "submit" in e}
    assert submits[str(a.pk)]["submit"]["time_limit_s"] == 30
    assert submits[str(a.pk)]["submit"]["duration_s"] == 200  # it ran on until its limit stopped it
    assert submits[str(b.pk)]["submit"]["after_ok"] == [str(a.pk)]
    assert submits[str(c.pk)]["submit"]["after_any"] == [str(a.pk)]
    assert not any(e.get("cancel") == str(b.pk) for e in data["events"]), "the replay cancels b itself"
    whole = submits[f"a{array[0].array_id}"]
    assert whole["at"] == 0
    assert (whole["submit"]["array"], whole["submit"]["max_running"]) == (3, 1)
    assert whole["submit"]["duration_s"] == 40
    # those that asked for none took the profile's maximum at their submit
    assert submits[str(b.pk)]["submit"]["time_limit_s"] == whole["submit"]["time_limit_s"] == 3600
    assert "Adjusted" not in data["description"]

    sc = scenarios.loads(export.dumps(data))
    lines = [line for line in Simulation(sc, sc.duration_us).run() if "summary" not in line]
    events = {(line["task"], line["event"]): line["at"] for line in lines if "task" in line}
    assert events[(str(a.pk), "timed_out")] == 30
    assert events[(str(b.pk), "canceled")] == 30
    assert events[(str(c.pk), "placed")] == 31  # released by the stop, placed at the next pass
    base = f"a{array[0].array_id}"
    assert [events[(f"{base}[{k}]", "placed")] for k in range(3)] == [0, 40, 80]
    figures = export_fidelity.fidelity(data)
    assert figures["tasks"] == 6
    assert figures["within_one_pass"] == 6, figures


def test_a_later_period_settles_ended_dependencies_and_cancels_the_array_tasks_that_had_ended():
    """From 50 s: a and b had ended (c's after_any on a is settled, so left out), the array's first
    task too (canceled at the array's submit); its second had run 10 of its 40 s, so the array's
    tasks get the mean of 30 and 40 s, with a note."""
    made = record()
    c, array = made["c"], made["array"]
    data = export.export(at(50), at(200))
    submits = {e["submit"]["id"]: e["submit"] for e in data["events"] if "submit" in e}
    base = f"a{array[0].array_id}"
    assert set(submits) == {str(c.pk), base}
    assert "after_any" not in submits[str(c.pk)]
    assert submits[base]["duration_s"] == 35
    assert {"at": 0, "cancel": f"{base}[0]"} in data["events"]
    assert "1 array(s) given the mean run time of their tasks" in data["description"]
    figures = export_fidelity.fidelity(data)
    assert figures["tasks"] == 3, figures


def test_the_export_carries_maintenance_windows_and_loans_as_quota_changes():
    """A window overlapping the period goes with its pool, clipped to the period; a dated quota
    loan's start and give-back are in the quota trail, so they are set_reservation events."""
    from decimal import Decimal

    from apps.policies import loans
    from apps.pools.services import maintenance

    pool = PoolFactory(name="onprem", capacity=4)
    profile = ProfileFactory(name="gpu1", gpus=1, time_weight=1, starvation_s=None)
    policies.link_pool(profile, pool)
    policies.update_profile(profile, unlimited_before_maintenance=True)
    dept = policies.create_policy(group=GroupFactory(name="Dept", slug="dept"), reservation=4, limit=4)
    a = policies.create_policy(
        group=GroupFactory(name="A", slug="a", parent=dept.group), reservation=3, limit=4
    )
    b = policies.create_policy(
        group=GroupFactory(name="B", slug="b", parent=dept.group), reservation=1, limit=4
    )
    policies.connect(policy=a, profile=profile, name="a/gpu1")
    policies.connect(policy=b, profile=profile, name="b/gpu1")
    maintenance.schedule(pool, starts_at=at(-50), ends_at=at(60), note="firmware", now=at(-100))
    with time_machine.travel(at(10), tick=False):
        loans.lend(
            a, b, what="reservation", amount=Decimal("2"), until=at(40), check_permission=False, now=at(10)
        )
    with time_machine.travel(at(40), tick=False):
        loans.end_due(at(40))
    data = export.export(at(0), at(100))
    assert data["pools"] == [
        {"name": "onprem", "capacity": 4, "maintenance": [{"start": 0, "end": 60, "note": "firmware"}]}
    ]
    assert data["profiles"][0]["unlimited_before_maintenance"] is True
    changes = sorted(
        (e["at"], e["set_reservation"]["policy"], e["set_reservation"]["reservation"])
        for e in data["events"]
        if "set_reservation" in e
    )
    assert changes == [(10, "a", 1), (10, "b", 3), (40, "a", 3), (40, "b", 1)]
    scenarios.parse(data)  # valid for the simulator as it stands
