"""What a worker gets with a task (nodes, labels, runtime), multi-node claims, the profile's stop
grace, and re-adoption of running work when a restarted daemon enrols again. All through the
worker API over the Django test client, on the real database."""

from decimal import Decimal

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.policies.models import ProfilePool
from apps.pools.models import Pool, Worker
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from tests.factories import (
    GroupFactory,
    PolicyFactory,
    PoolFactory,
    ProfileFactory,
    ProjectFactory,
    UserFactory,
)
from tests.pools.conftest import bearer

pytestmark = pytest.mark.django_db

ENROL, HEARTBEAT, CLAIM = "/api/v1/workers/enrol", "/api/v1/workers/heartbeat", "/api/v1/workers/claim"


@pytest.fixture
def placed(pool):
    """placed(gpus, nodes=1, profile=None, **submit) -> a task placed on ``pool``."""
    user = UserFactory(username="vera.k@example.org")
    group = GroupFactory(slug="vision_lab")
    policy = PolicyFactory(group=group, reservation=0, limit=64)
    resources = {}

    def make(gpus="1", nodes=1, profile=None, **fields):
        profile = profile or ProfileFactory(gpus=Decimal(gpus))
        if profile.pk not in resources:
            policies.link_pool(profile, pool)
            resources[profile.pk] = policies.connect(policy=policy, profile=profile)
        task = lifecycle.submit(
            user=user, compute_resource=resources[profile.pk], command="train", nodes=nodes, **fields
        )
        task = Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
            pk=task.pk
        )
        lifecycle.place_many([(task, pool)], timezone.now())
        return task

    return make


def claim(client, **body):
    answer = client.post(CLAIM, body, format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()["tasks"]


def test_a_claimed_task_carries_nodes_labels_and_runtime(pool, enrol, placed):
    pool.namespace = "ml"
    pool.save()
    profile = ProfileFactory(gpus=2, image="ghcr.io/org/base:1", stop_grace_s=90, memory_limit_mb=32768)
    project = ProjectFactory(group=GroupFactory(slug="other"), name="Detector v2!")
    task = placed(profile=profile)
    Task.objects.filter(pk=task.pk).update(project=project)
    _, client = enrol()
    [got] = claim(client, free_gpus="4")
    assert got["id"] == task.pk and got["nodes"] == 1 and got["gpus"] == "2.000"
    assert got["labels"] == {
        "task": str(task.pk),
        "pool": str(pool.pk),
        "group": "vision_lab",
        "project": "Detector-v2",
        "user": "vera.k-example.org",
    }
    assert got["runtime"] == {
        "image": "ghcr.io/org/base:1",
        "namespace": "ml",
        "gpu_resource": "nvidia.com/gpu",
        "gpu_count": 2,
        "memory_limit_mb": 32768,
        "grace_s": 90.0,
    }


@override_settings(WORKER_STOP_GRACE_S=17)
def test_the_spec_image_wins_and_the_namespace_can_be_per_group(pool, enrol, placed):
    pool.namespace, pool.namespace_per_group = "ml", True
    pool.save()
    placed(spec={"image": "ghcr.io/org/train:2"})
    _, client = enrol()
    [got] = claim(client, free_gpus="4")
    runtime = got["runtime"]
    assert runtime["image"] == "ghcr.io/org/train:2" and runtime["namespace"] == "ml-vision-lab"
    assert runtime["grace_s"] == 17.0 and runtime["memory_limit_mb"] is None
    assert got["labels"]["project"] == ""


def test_a_fraction_gets_the_resource_it_mapped_for_the_profile_on_the_pool(pool, enrol, placed):
    mapped, unmapped = ProfileFactory(gpus=Decimal("0.125")), ProfileFactory(gpus=Decimal("0.5"))
    cpu = ProfileFactory(gpus=0)
    placed(profile=mapped)
    ProfilePool.objects.filter(profile=mapped, pool=pool).update(
        gpu_resource="nvidia.com/mig-1g.10gb", gpu_resource_count=2
    )
    placed(profile=unmapped)
    placed(profile=cpu)
    _, client = enrol()
    got = claim(client, free_gpus="4", max_tasks=3)
    assert [(t["runtime"]["gpu_resource"], t["runtime"]["gpu_count"]) for t in got] == [
        ("nvidia.com/mig-1g.10gb", 2),
        ("", 0),
        ("", 0),
    ]


def test_a_gpu_resource_that_is_no_kubernetes_resource_name_is_refused():
    link = ProfilePool(profile=ProfileFactory(), pool=PoolFactory(), gpu_resource="nvidia.com/mig 1g")
    with pytest.raises(Exception) as refused:
        link.full_clean()
    assert "gpu_resource" in refused.value.message_dict


def test_multi_node_work_goes_only_to_a_worker_that_says_it_runs_it(pool, enrol, placed):
    wide = placed(gpus="2", nodes=3)
    narrow = placed(gpus="1")
    _, client = enrol(gpus="8")
    assert [t["id"] for t in claim(client, free_gpus="8", max_tasks=5)] == [narrow.pk]
    assert claim(client, slots=["1"] * 8, max_tasks=5, multi_node=True) == []
    _, k8s = enrol(hostname="k8s", gpus="8")
    [got] = claim(k8s, free_gpus="8", multi_node=True)
    assert got["id"] == wide.pk and got["nodes"] == 3 and got["gpus"] == "2.000"


def test_a_multi_node_task_takes_gpus_times_nodes_of_the_free_total(pool, enrol, placed):
    wide = placed(gpus="2", nodes=3)
    _, client = enrol(gpus="8")
    assert claim(client, free_gpus="5", multi_node=True) == []
    assert [t["id"] for t in claim(client, free_gpus="6", multi_node=True)] == [wide.pk]


def test_a_stop_command_carries_the_profiles_grace(pool, enrol, placed):
    task = placed(profile=ProfileFactory(gpus=1, stop_grace_s=120))
    worker, client = enrol()
    claim(client, free_gpus="4")
    lifecycle.request_stop_many([Task.objects.get(pk=task.pk)], Task.StopReason.RECLAIM, timezone.now())
    answer = client.post(HEARTBEAT, {"tasks": [task.pk]}, format="json").json()
    assert answer["commands"] == [
        {"stop": task.pk, "reason": "preempted", "why": "reclaim", "grace_s": 120.0}
    ]


def test_the_enrol_answer_accepts_kubernetes_and_docker_modes(enrolment):
    for mode in ("kubernetes", "docker"):
        answer = bearer(enrolment[1]).post(
            ENROL, {"hostname": mode, "gpus": "4", "mode": mode}, format="json"
        )
        assert answer.status_code == 201, answer.content
        assert Worker.objects.get(pk=answer.json()["worker"]).mode == mode


def test_a_restarted_daemon_keeps_its_running_work_and_the_rest_is_requeued(pool, enrolment, enrol, placed):
    """A (running) and B (claimed) on the old worker; the new daemon says A still runs. A moves
    with its open interval and no requeue; B goes back to its queue. Ids it names that were not
    the old worker's (another worker's task, a waiting task) are ignored."""
    old, client = enrol(hostname="node-1")
    a, b = placed(name="A"), placed(name="B")
    claim(client, free_gpus="4", max_tasks=2)
    client.post(f"/api/v1/workers/tasks/{a.pk}/started", {}, format="json")
    _, other_client = enrol(hostname="node-2")
    other = placed(name="other")
    claim(other_client, free_gpus="4")
    other_pool_task = Task.objects.get(pk=other.pk)
    waiting = lifecycle.submit(user=UserFactory(), compute_resource=a.compute_resource, command="x")
    interval = UsageInterval.objects.get(task=a)

    running = [a.pk, other_pool_task.pk, waiting.pk, 999_999]
    answer = bearer(enrolment[1]).post(
        ENROL, {"hostname": "node-1", "gpus": "4", "mode": "kubernetes", "running": running}, format="json"
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["pool_id"] == pool.pk
    new = Worker.objects.get(pk=body["worker"])
    assert [t["id"] for t in body["adopted"]] == [a.pk]
    adopted = body["adopted"][0]
    assert adopted["labels"]["task"] == str(a.pk) and adopted["runtime"]["gpu_resource"] == "nvidia.com/gpu"

    a.refresh_from_db()
    assert a.state == Task.State.RUNNING and a.worker == new and a.preemption_count == 0
    assert list(UsageInterval.objects.filter(task=a).values_list("pk", "end")) == [(interval.pk, None)]
    assert not a.events.filter(kind__in=[TaskEvent.Kind.REQUEUED, TaskEvent.Kind.PREEMPTED]).exists()
    b.refresh_from_db()
    assert b.state == Task.State.QUEUED and b.last_preemption_reason == Task.StopReason.WORKER_LOST
    assert Task.objects.get(pk=other.pk).worker.hostname == "node-2"
    assert Task.objects.get(pk=waiting.pk).state == Task.State.QUEUED
    assert Worker.objects.get(pk=old.pk).state == Worker.State.RETIRED

    new_client = bearer(body["token"])
    beat = new_client.post(HEARTBEAT, {"tasks": [a.pk]}, format="json").json()
    assert beat["commands"] == []
    exited = new_client.post(f"/api/v1/workers/tasks/{a.pk}/exited", {"exit_code": 0}, format="json")
    assert exited.json() == {"task": a.pk, "state": "succeeded", "yours": False}


def test_an_adopted_task_comes_back_on_the_gpu_slots_it_was_claimed_on(pool, enrolment, enrol, placed):
    """A slot-claiming daemon (Docker: --gpus device=<slot>) ran the task on GPU 1; restarted, it
    must get GPU 1 back, or its next claim would offer GPU 1, where the container still runs."""
    task = placed(gpus="1")
    _, client = enrol(hostname="box-1", gpus="2", mode="docker")
    [got] = claim(client, slots=["0.5", "1"], max_tasks=1)
    assert got["slots"] == [1]
    answer = bearer(enrolment[1]).post(
        ENROL, {"hostname": "box-1", "gpus": "2", "mode": "docker", "running": [task.pk]}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["adopted"][0]["slots"] == [1]


@pytest.mark.parametrize("running", [[2**63], [10**30]])
def test_a_running_id_beyond_any_task_id_is_no_500(enrolment, running):
    answer = bearer(enrolment[1]).post(
        ENROL, {"hostname": "a", "gpus": "1", "running": running}, format="json"
    )
    assert answer.status_code in (201, 400), answer.content[:300]


@pytest.mark.parametrize("running", [["1"], [0], list(range(1, 1002)), "1"])
def test_bad_running_lists_are_400_on_running(enrolment, running):
    answer = bearer(enrolment[1]).post(
        ENROL, {"hostname": "a", "gpus": "1", "running": running}, format="json"
    )
    assert answer.status_code == 400 and "running" in answer.json()


def test_a_pool_cannot_stop_being_multi_node_nor_join_a_profile_while_multi_node_work_waits(placed, pool):
    from django.core.exceptions import ValidationError

    task = placed(gpus="2", nodes=2)
    pool.multi_node = False
    with pytest.raises(ValidationError) as refused:
        pool.full_clean()
    assert "multi_node" in refused.value.message_dict
    single = PoolFactory(name="rack-7", kind=Pool.Kind.BAREMETAL)
    with pytest.raises(ValidationError) as refused:
        policies.link_pool(task.compute_resource.profile, single)
    assert "pool" in refused.value.message_dict and "rack-7" in str(refused.value)
