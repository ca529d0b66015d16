"""Never fits is refused at submit: a task larger than the largest pool its profile lists (declared
capacity, enabled or not), or on a profile that lists no pool, is refused naming the field, the size
and the largest pool, by every way in that goes through ``check_submission`` and the schedules."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.cloud.models import CloudPool, InstanceType
from apps.pools.models import Pool
from apps.tasks import services
from apps.tasks.models import Task
from tests.factories import (
    ComputeResourceFactory,
    GroupFactory,
    MembershipFactory,
    PolicyFactory,
    PoolFactory,
    ProfileFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 2, 1, 58, tzinfo=UTC)


@pytest.fixture
def p8():
    """Profile p8 (size from the task) lists dgx (8 GPUs) and small (4 GPUs), both multi-node."""
    profile = ProfileFactory(name="p8", gpus=1, size_from_task=True)
    profile.pools.add(PoolFactory(name="dgx", capacity=8), PoolFactory(name="small", capacity=4))
    return ComputeResourceFactory(name="team/p8", policy=PolicyFactory(limit=64), profile=profile)


def submit(resource, **fields):
    return services.submit(user=UserFactory(), compute_resource=resource, command="train", **fields)


def refusal(resource, **fields) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        submit(resource, **fields)
    return caught.value.message_dict


def test_a_task_larger_than_the_largest_pool_is_refused_on_gpus_naming_size_and_pool(p8):
    assert refusal(p8, gpus="16") == {
        "gpus": ["16 GPUs never fit: the largest pool of profile p8 is dgx (8 GPUs)."]
    }
    assert not Task.objects.exists()


def test_a_task_as_large_as_the_largest_pool_is_accepted(p8):
    assert submit(p8, gpus="8").state == Task.State.QUEUED


def test_too_many_nodes_is_refused_on_nodes_when_the_gpus_alone_fit(p8):
    assert refusal(p8, gpus="4", nodes=3) == {
        "nodes": ["4 GPUs x 3 nodes = 12 GPUs never fit: the largest pool of profile p8 is dgx (8 GPUs)."]
    }
    assert submit(p8, gpus="4", nodes=2).nodes == 2


def test_a_disabled_pool_still_counts_its_declared_capacity(p8):
    """Rule: enabled or not; a disabled pool may come back (the engine's verdict says never_fits)."""
    Pool.objects.filter(name="dgx").update(enabled=False)
    assert submit(p8, gpus="8").gpus == 8


def test_a_profile_listing_no_pool_is_refused_on_the_compute_resource():
    resource = ComputeResourceFactory(name="team/orphan", profile=ProfileFactory(name="orphan"))
    assert refusal(resource) == {
        "compute_resource": ["Profile orphan lists no pool, so compute resource team/orphan can run nothing."]
    }


def test_a_cloud_pool_counts_its_maximum_even_while_its_autoscaler_is_disabled(p8):
    """Rule: an autoscaled pool's declared capacity is its maximum (types x most instances); a
    disabled autoscaler sets the pool's capacity to 0, but the pool may grow again."""
    cloud = PoolFactory(name="burst", kind=Pool.Kind.CLOUD, capacity=0)
    p8.profile.pools.add(cloud)
    cloud_pool = CloudPool.objects.create(pool=cloud, provider="local", enabled=False)
    InstanceType.objects.create(cloud_pool=cloud_pool, name="x8", gpus=8, max_count=2)
    assert submit(p8, gpus="16").gpus == 16
    assert refusal(p8, gpus="24") == {
        "gpus": ["24 GPUs never fit: the largest pool of profile p8 is burst (16 GPUs)."]
    }


def test_bulk_names_each_refused_item_and_reads_the_largest_pool_once_per_profile(p8):
    """Rule: all or none; the largest pool is one query per profile, whatever the number of items."""
    items = [{"compute_resource": p8, "command": "x", "gpus": "2"} for _ in range(20)]
    items[3] = {**items[3], "gpus": "9"}
    with CaptureQueriesContext(connection) as captured, pytest.raises(services.SubmissionsRefused) as caught:
        services.submit_many(user=UserFactory(), items=items)
    assert caught.value.errors == {
        3: {"gpus": ["9 GPUs never fit: the largest pool of profile p8 is dgx (8 GPUs)."]}
    }
    assert len([q for q in captured.captured_queries if "policies_profilepool" in q["sql"]]) == 1
    assert not Task.objects.exists()


def test_a_schedule_whose_task_never_fits_is_refused_at_creation(p8):
    owner = MembershipFactory(group=p8.policy.group, user=UserFactory()).user
    with pytest.raises(ValidationError) as caught:
        services.create_schedule(
            owner=owner, now=T0, name="nightly", cron="0 2 * * *", compute_resource=p8, command="x", gpus="16"
        )
    assert caught.value.message_dict["gpus"] == [
        "16 GPUs never fit: the largest pool of profile p8 is dgx (8 GPUs)."
    ]


def test_a_schedule_whose_task_stops_fitting_stops_at_its_due_time_with_the_reason(p8):
    owner = MembershipFactory(group=p8.policy.group, user=UserFactory()).user
    schedule = services.create_schedule(
        owner=owner, now=T0, name="nightly", cron="0 2 * * *", compute_resource=p8, command="x", gpus="8"
    )
    Pool.objects.filter(name="dgx").update(capacity=Decimal(6))
    assert services.submit_due_schedules(T0 + timedelta(minutes=3)) == 0
    schedule.refresh_from_db()
    assert not schedule.active
    assert schedule.stopped_reason == (
        "The task was refused: 8 GPUs never fit: the largest pool of profile p8 is dgx (6 GPUs)."
    )


def test_a_cpu_task_fits_a_profile_whose_pools_have_no_gpus():
    cpu = ProfileFactory(name="cpu", gpus=0)
    cpu.pools.add(PoolFactory(capacity=0))
    resource = ComputeResourceFactory(profile=cpu, policy=PolicyFactory(group=GroupFactory()))
    assert submit(resource).gpus == 0


def test_the_admin_form_refuses_it_on_the_gpus_field(client, p8):
    admin = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(admin)
    form = {
        "user": admin.pk,
        "compute_resource": p8.pk,
        "gpus": "16",
        "command": "train",
        "spec": "{}",
        "channel": "admin",
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
    }
    page = client.post(reverse("admin:tasks_task_add"), form)
    assert page.status_code == 200
    assert "16 GPUs never fit: the largest pool of profile p8 is dgx (8 GPUs)." in page.content.decode()
    assert not Task.objects.exists()


def test_the_admin_task_list_filters_waiting_tasks_by_verdict_rule(client, p8):
    admin = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(admin)
    stuck, waiting = submit(p8, gpus="8"), submit(p8, gpus="8")
    Task.objects.filter(pk=stuck.pk).update(verdict={"rule": "never_fits", "cause": "capacity"})
    Task.objects.filter(pk=waiting.pk).update(verdict={"rule": "no_capacity"})
    page = client.get(reverse("admin:tasks_task_changelist"), {"verdict": "never_fits"})
    assert [task.pk for task in page.context["cl"].result_list] == [stuck.pk]
