"""Multi-node tasks at submission (API, schedules, admin) and the run options a worker reads from
the spec (image, resources): bad input is a 400 naming the field or the spec path."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from apps.accounts import services as accounts
from apps.policies import services as policies
from apps.pools.models import Pool
from apps.tasks import services
from apps.tasks.limits import spec_shape_error
from apps.tasks.models import Schedule, Task
from tests.factories import MembershipFactory, PolicyFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def resource():
    """A profile sized by its tasks on a Kubernetes pool (multi-node by kind), limit 8."""
    profile = ProfileFactory(name="a100-any", gpus=1, size_from_task=True)
    policies.link_pool(profile, PoolFactory(name="k8s", kind=Pool.Kind.KUBERNETES))
    policy = PolicyFactory(limit=8, reservation=0)
    return policies.connect(policy=policy, profile=profile, name="vision/a100-any")


@pytest.fixture
def member(resource):
    user = UserFactory(username="vera")
    MembershipFactory(user=user, group=resource.policy.group)
    return user


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {accounts.create_api_token(user=user, name='t')[1]}")
    return client


def post_task(user, **body):
    return api(user).post(
        "/api/v1/tasks/", {"compute_resource": "vision/a100-any", "command": "train", **body}, format="json"
    )


def test_a_task_on_two_nodes_is_submitted_and_read_back_with_its_nodes(member):
    answer = post_task(member, gpus="2", nodes=2)
    assert answer.status_code == 201, answer.json()
    assert answer.json()["nodes"] == 2 and answer.json()["gpus"] == "2.000"
    task = Task.objects.get()
    assert task.nodes == 2 and task.counted_gpus == Decimal("4")
    listed = api(member).get("/api/v1/tasks/").json()["results"]
    assert listed[0]["nodes"] == 2


def test_nodes_default_to_one(member):
    answer = post_task(member, gpus="2")
    assert answer.status_code == 201 and answer.json()["nodes"] == 1


@pytest.mark.parametrize("nodes", [0, 65, -1, "2", 1.5, True, None])
def test_nodes_outside_1_to_64_or_not_a_whole_number_are_400_on_nodes(member, nodes):
    answer = post_task(member, gpus="1", nodes=nodes)
    assert answer.status_code == 400 and "nodes" in answer.json(), answer.json()
    assert not Task.objects.exists()


def test_gpus_times_nodes_above_the_limit_is_400_naming_gpus_and_nodes(member):
    answer = post_task(member, gpus="4", nodes=3)
    assert answer.status_code == 400
    body = answer.json()
    assert "gpus" in body and "nodes" in body and "4 x 3 = 12" in str(body["nodes"])
    assert post_task(member, gpus="4", nodes=2).status_code == 201


def test_several_nodes_need_gpus_on_each(resource):
    cpu = ProfileFactory(name="cpu", gpus=0)
    policies.link_pool(cpu, PoolFactory(kind=Pool.Kind.HPC))
    cpu_resource = policies.connect(policy=resource.policy, profile=cpu, name="vision/cpu")
    with pytest.raises(ValidationError) as refused:
        services.submit(user=UserFactory(), compute_resource=cpu_resource, command="x", nodes=2)
    assert "nodes" in refused.value.message_dict


def test_several_nodes_are_refused_when_a_pool_of_the_profile_is_not_multi_node(member, resource):
    policies.link_pool(resource.profile, PoolFactory(name="rack-7", kind=Pool.Kind.BAREMETAL))
    answer = post_task(member, gpus="1", nodes=2)
    assert answer.status_code == 400 and "rack-7" in str(answer.json()["nodes"])
    assert post_task(member, gpus="1", nodes=1).status_code == 201


def test_a_pool_is_multi_node_by_kind_unless_set():
    assert PoolFactory(kind=Pool.Kind.KUBERNETES).multi_node is True
    assert PoolFactory(kind=Pool.Kind.HPC).multi_node is True
    assert PoolFactory(kind=Pool.Kind.BAREMETAL).multi_node is False
    assert PoolFactory(kind=Pool.Kind.CLOUD).multi_node is False
    assert PoolFactory(kind=Pool.Kind.CLOUD, multi_node=True).multi_node is True
    assert PoolFactory(kind=Pool.Kind.HPC, multi_node=False).multi_node is False


def test_a_schedule_keeps_nodes_and_submits_its_tasks_on_them(member):
    body = {"name": "nightly", "cron": "0 2 * * *", "compute_resource": "vision/a100-any", "command": "x"}
    answer = api(member).post("/api/v1/schedules/", {**body, "gpus": "2", "nodes": 3}, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["nodes"] == 3
    schedule = Schedule.objects.get()
    assert services._run_schedule(schedule.pk, schedule.next_run_at)
    assert Task.objects.get().nodes == 3
    refused = api(member).post("/api/v1/schedules/", {**body, "gpus": "4", "nodes": 3}, format="json")
    assert refused.status_code == 400 and "nodes" in refused.json()


def test_the_admin_submits_a_task_on_nodes_and_refuses_too_many(client, resource):
    admin = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(admin)
    form = {
        "name": "",
        "user": admin.pk,
        "compute_resource": resource.pk,
        "gpus": "2",
        "nodes": "5",
        "command": "train",
        "spec": "{}",
        "channel": "admin",
        "_events-TOTAL_FORMS": "0",
    }
    url = reverse("admin:tasks_task_add")
    page = client.post(url, {**form, "events-TOTAL_FORMS": "0", "events-INITIAL_FORMS": "0"})
    assert page.status_code == 200 and "2 x 5 = 10" in page.content.decode()
    ok = client.post(url, {**form, "nodes": "4", "events-TOTAL_FORMS": "0", "events-INITIAL_FORMS": "0"})
    assert ok.status_code == 302, ok.content.decode()[:3000]
    assert Task.objects.get().nodes == 4


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"image": ""}, "spec.image"),
        ({"image": 7}, "spec.image"),
        ({"image": "bad image"}, "spec.image"),
        ({"image": "ok\nnot"}, "spec.image"),
        ({"image": "a" * 513}, "spec.image"),
        ({"resources": []}, "spec.resources"),
        ({"resources": {"gpu": "1"}}, "spec.resources"),
        ({"resources": {"cpu": 4}}, "spec.resources.cpu"),
        ({"resources": {"cpu": "four"}}, "spec.resources.cpu"),
        ({"resources": {"memory": "16GB"}}, "spec.resources.memory"),
        ({"resources": {"memory": "-1Gi"}}, "spec.resources.memory"),
    ],
)
def test_a_bad_image_or_resources_in_the_spec_is_400_naming_the_path(member, spec, path):
    answer = post_task(member, spec=spec)
    assert answer.status_code == 400, answer.json()
    assert str(answer.json()["spec"]).count(path) >= 1, answer.json()


def test_good_run_options_are_kept_and_unknown_keys_too(member):
    spec = {
        "image": "ghcr.io/org/train:1.4@sha256:abc",
        "resources": {"cpu": "500m", "memory": "16Gi"},
        "env": {"EPOCHS": 3},
        "team_note": {"anything": [1, 2]},
    }
    answer = post_task(member, spec=spec)
    assert answer.status_code == 201, answer.json()
    assert Task.objects.get().spec == spec


@pytest.mark.parametrize("quantity", ["1", "0.5", "500m", "2k", "16Gi", "1.5G", "3Ei", "100M"])
def test_kubernetes_quantities_pass(quantity):
    assert spec_shape_error({"resources": {"cpu": quantity, "memory": quantity}}) is None
