"""The autoscaler never leaves a billed node behind, never exceeds a type's most, never loops on nodes
that cannot enrol, and shuts out nodes it let go (local provider: every node is a real
``klique-worker`` process; its control plane is a closed port, so a node enrols only when a test
drives the enrolment itself)."""

import json
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.cloud import services as cloud
from apps.cloud.models import CloudNode
from apps.cloud.services import autoscaler, launching
from apps.cloud.services import pools as pool_writes
from apps.engine import services as engine
from apps.policies import services as policies
from apps.pools.models import Pool, Worker
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from apps.workers import services as protocol
from klique.cloud.providers import CapacityUnavailable, ProviderError
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db


class Wrapped:
    """The real local provider, with one launch behaviour changed by a subclass."""

    def __init__(self, real):
        self.real = real

    def launch(self, pool, node, instance_type, market, user_data):
        return self.real.launch(pool, node, instance_type, market, user_data)

    def describe(self, pool):
        return self.real.describe(pool)

    def terminate(self, ids):
        return self.real.terminate(ids)


class AnswerLost(Wrapped):
    """The first launch is carried out, but its answer is lost (a read timeout after the retries)."""

    lost = False

    def launch(self, *args):
        instance = self.real.launch(*args)
        if not self.lost:
            self.lost = True
            raise ProviderError("RequestTimeout", "Read timeout on endpoint URL")
        return instance


def use(monkeypatch, provider):
    monkeypatch.setattr(pool_writes, "provider_for", lambda _: provider)


def test_an_instance_whose_launch_answer_was_lost_is_terminated_once_no_node_stands_for_it(
    local_cloud, place, monkeypatch
):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 2, False),))
    provider = AnswerLost(cloud.provider_for(cloud_pool))
    use(monkeypatch, provider)
    task = place(cloud_pool.pool, 1)[0]
    cloud.autoscale()
    first = CloudNode.objects.get()
    assert first.state == "terminated" and first.reason.startswith("launch failed: RequestTimeout")
    [orphan] = [i for i in provider.describe(cloud_pool.pool.name) if i.live]
    assert orphan.node == first.name, "the instance is at the provider, tagged with the node's name"
    Task.objects.filter(pk=task.pk).update(state=Task.State.SUCCEEDED, ended_at=timezone.now())
    cloud.autoscale()
    assert [i for i in provider.describe(cloud_pool.pool.name) if i.live], "kept within the listing grace"
    later = timezone.now() + autoscaler.LIST_GRACE + timedelta(seconds=1)
    cloud.autoscale(later)
    deadline = time.monotonic() + 30
    while [i for i in provider.describe(cloud_pool.pool.name) if i.live] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [i for i in provider.describe(cloud_pool.pool.name) if i.live]


def test_a_launch_planned_by_a_pass_that_died_is_ended_after_the_launch_grace_and_launched_again(
    local_cloud, place
):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 2, False),))
    place(cloud_pool.pool, 1)
    t0 = timezone.now()
    with transaction.atomic():  # the pass's decide step; then its process dies before the launch
        Pool.objects.select_for_update().filter(pk=cloud_pool.pool_id).first()
        launching.launch_plan(cloud_pool, t0)
    lost = CloudNode.objects.get()
    assert cloud.autoscale(t0 + timedelta(seconds=30))["burst"].get("launched") is None
    summary = cloud.autoscale(t0 + autoscaler.LAUNCH_GRACE + timedelta(seconds=1))["burst"]
    lost.refresh_from_db()
    assert lost.state == "terminated" and lost.reason == "launch never completed"
    assert summary["launched"] == 1
    assert CloudNode.objects.exclude(pk=lost.pk).get().state == "booting"


def test_a_launch_that_lands_after_its_node_was_ended_is_terminated(local_cloud, place, monkeypatch):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),))

    class EndedMeanwhile(Wrapped):
        def launch(self, pool, node, *args):
            CloudNode.objects.filter(name=node).update(state="terminated", reason="launch never completed")
            return self.real.launch(pool, node, *args)

    provider = EndedMeanwhile(cloud.provider_for(cloud_pool))
    use(monkeypatch, provider)
    place(cloud_pool.pool, 1)
    summary = cloud.autoscale()["burst"]
    assert not summary.get("launched")
    node = CloudNode.objects.get()
    assert node.state == "terminated" and node.instance_id == ""
    assert not [i for i in provider.describe(cloud_pool.pool.name) if i.live], "terminated at once"


def test_two_passes_falling_back_at_once_never_exceed_the_next_types_most(local_cloud, place, monkeypatch):
    cloud_pool = local_cloud(types=(("local.a", 1, 2, False), ("local.b", 1, 1, False)))

    class OtherPassMeanwhile(Wrapped):
        """local.a is refused for capacity; while the first pass launches local.b, another runs."""

        nested = False

        def launch(self, pool, node, instance_type, market, user_data):
            if instance_type == "local.a":
                raise CapacityUnavailable("InsufficientInstanceCapacity", "no local.a capacity")
            if not self.nested:
                self.nested = True
                place(cloud_pool.pool, 1)
                cloud.autoscale(timezone.now())
            return self.real.launch(pool, node, instance_type, market, user_data)

    use(monkeypatch, OtherPassMeanwhile(cloud.provider_for(cloud_pool)))
    place(cloud_pool.pool, 1)
    cloud.autoscale(timezone.now())
    launched = CloudNode.objects.exclude(instance_id="")
    assert [n.instance_type.name for n in launched] == ["local.b"]
    refused = CloudNode.objects.get(instance_id="")
    assert refused.reason == "no capacity: every type with room was refused"


def test_a_type_whose_nodes_never_enrol_is_launched_with_a_growing_backoff(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),), boot_timeout_s=60)
    place(cloud_pool.pool, 1)
    t0 = timezone.now()
    launches = []
    for minute in range(9):  # nine boot timeouts' time, a pass a minute
        now = t0 + timedelta(seconds=61 * minute)
        summary = cloud.autoscale(now)["burst"]
        deadline = time.monotonic() + 30
        while CloudNode.objects.filter(state="releasing").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
            summary["launched"] = summary.get("launched", 0) + cloud.autoscale(now)["burst"].get(
                "launched", 0
            )
        if summary.get("launched"):
            launches.append(minute)
    assert launches == [0, 2, 6], "waits 2, then 4 boot timeouts after the latest failed launch"


@pytest.mark.parametrize(
    "field, value, reason",
    [
        ("boot_timeout_s", 59, "greater than or equal to 60"),
        ("boot_timeout_s", 2147483647, "less than or equal to 86400"),
        ("idle_timeout_s", 0, "greater than or equal to 1"),
        ("spot_timeout_s", 86401, "less than or equal to 86400"),
    ],
)
def test_timeouts_out_of_bounds_are_refused_with_the_field(local_cloud, field, value, reason):
    with pytest.raises(ValidationError) as error:
        local_cloud(**{field: value})
    assert reason in str(error.value.message_dict[field])


def test_the_admin_answers_a_boot_timeout_out_of_range_with_a_form_error(local_cloud, admin_client):
    cloud_pool = local_cloud()
    [kind] = cloud_pool.instance_types.all()
    form = {
        "pool": cloud_pool.pool_id,
        "provider": "local",
        "settings": json.dumps(cloud_pool.settings),
        "enabled": "on",
        "boot_timeout_s": 2147483647,
        "idle_timeout_s": 300,
        "spot_timeout_s": 120,
        "instance_types-TOTAL_FORMS": 1,
        "instance_types-INITIAL_FORMS": 1,
        "instance_types-0-id": kind.pk,
        "instance_types-0-cloud_pool": cloud_pool.pk,
        "instance_types-0-rank": 0,
        "instance_types-0-name": kind.name,
        "instance_types-0-gpus": 1,
        "instance_types-0-max_count": 2,
        "instance_types-0-spot": "on",
    }
    answer = admin_client.post(f"/admin/cloud/cloudpool/{cloud_pool.pk}/change/", form)
    assert answer.status_code == 200 and "less than or equal to 86400" in answer.content.decode()
    assert Pool.objects.get(pk=cloud_pool.pool_id).claim_timeout_s == 600 + 120


def test_a_disabled_cloud_pool_declares_no_capacity_so_no_work_is_placed_there(local_cloud):
    cloud_pool = local_cloud(enabled=False)
    assert Pool.objects.get(pk=cloud_pool.pool_id).capacity == 0
    profile = policies.create_profile(name="1gpu", gpus=1, pools=[cloud_pool.pool])
    policy = policies.create_policy(group=GroupFactory(), reservation=2, limit=2)
    resource = policies.connect(policy=policy, profile=profile, name="r-1gpu")
    task = lifecycle.submit(user=UserFactory(), compute_resource=resource, command="sleep 1")
    engine.run_pass()
    cloud.autoscale()
    task.refresh_from_db()
    assert task.state != Task.State.PLACED and not CloudNode.objects.exists()
    cloud_pool.enabled = True
    cloud_pool.save()
    cloud.sync_capacity(cloud_pool)
    assert Pool.objects.get(pk=cloud_pool.pool_id).capacity == 2


def test_a_node_released_at_its_boot_timeout_is_shut_out(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),), boot_timeout_s=60)
    place(cloud_pool.pool, 1)
    t0 = timezone.now()
    cloud.autoscale(t0)
    node = CloudNode.objects.get()
    token = node.enrolment_token
    late = t0 + timedelta(seconds=61)
    cloud.autoscale(late)
    node.refresh_from_db()
    assert node.state in ("releasing", "terminated") and node.reason.startswith("boot timeout")
    token.refresh_from_db()
    with pytest.raises(protocol.InvalidToken):
        protocol.enrol(token, hostname=node.name, gpus=Decimal(1), mode="process", now=late)


def test_a_worker_enrolled_by_a_node_released_before_it_was_ready_is_retired(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),), boot_timeout_s=60)
    place(cloud_pool.pool, 1)
    t0 = timezone.now()
    cloud.autoscale(t0)
    node = CloudNode.objects.get()
    token = node.enrolment_token
    # it enrols in the very pass that times it out, after that pass linked the nodes that enrolled
    late = t0 + timedelta(seconds=61)
    with transaction.atomic():
        Pool.objects.select_for_update().filter(pk=cloud_pool.pool_id).first()
        worker, _ = protocol.enrol(token, hostname=node.name, gpus=Decimal(1), mode="process", now=late)
        [released] = autoscaler._timed_out(cloud_pool, late)
    worker.refresh_from_db()
    assert released.pk == node.pk and worker.state == Worker.State.RETIRED


def test_a_cloud_nodes_restarted_daemon_enrols_again_adopts_its_work_and_the_node_follows_it(
    local_cloud, place
):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),))
    task = place(cloud_pool.pool, 1)[0]
    now = timezone.now()
    cloud.autoscale(now)
    node = CloudNode.objects.get()
    token = node.enrolment_token
    worker, _ = protocol.enrol(token, hostname=node.name, gpus=Decimal(1), mode="process", now=now)
    cloud.autoscale(now)
    protocol.claim(worker, free=None, free_gpus=Decimal(1), max_tasks=1, now=now)
    protocol.report_started(worker, task.pk, now=now)
    token.refresh_from_db()
    restarted = now + timedelta(hours=1)  # long after the token's expiry
    again, _, adopted = protocol.enrol_adopting(
        token, hostname=node.name, gpus=Decimal(1), mode="process", running=[task.pk], now=restarted
    )
    assert [claim.task.pk for claim in adopted] == [task.pk]
    with pytest.raises(protocol.InvalidToken):
        protocol.enrol(token, hostname="another-host", gpus=Decimal(1), mode="process", now=restarted)
    summary = cloud.autoscale(restarted + timedelta(seconds=cloud_pool.idle_timeout_s + 1))["burst"]
    node.refresh_from_db()
    assert not summary.get("released") and node.worker_id == again.pk, "the node follows its new worker"


def test_no_node_is_launched_for_work_no_instance_type_can_hold(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 4, False),))
    place(cloud_pool.pool, 1, gpus="4")
    summary = cloud.autoscale()["burst"]
    assert not summary.get("launched") and summary["demand"] == "0"


def test_work_no_type_can_hold_does_not_keep_an_idle_node(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),), idle_timeout_s=60)
    first = place(cloud_pool.pool, 1)[0]
    t0 = timezone.now()
    cloud.autoscale(t0)
    node = CloudNode.objects.get()
    worker, _ = protocol.enrol(
        node.enrolment_token, hostname=node.name, gpus=Decimal(1), mode="process", now=t0
    )
    protocol.claim(worker, free=None, free_gpus=Decimal(1), max_tasks=1, now=t0)
    protocol.report_started(worker, first.pk, now=t0)
    protocol.report_exited(worker, first.pk, exit_code=0, now=t0)
    # Submitted while the type held 2 GPUs (a task no pool can hold is refused at submit); the
    # type changed since.
    types = cloud_pool.instance_types.all()
    types.update(gpus=2)
    place(cloud_pool.pool, 1, gpus="2")
    types.update(gpus=1)
    cloud.autoscale(t0)
    summary = cloud.autoscale(t0 + timedelta(seconds=61))["burst"]
    node.refresh_from_db()
    assert summary["released"] == 1 and node.reason == "idle for 60 s"


def test_the_idle_timer_runs_from_the_workers_last_task_even_one_ended_between_two_passes(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 1, False),), idle_timeout_s=300)

    def run(worker, task, at):
        protocol.claim(worker, free=None, free_gpus=Decimal(1), max_tasks=1, now=at)
        protocol.report_started(worker, task.pk, now=at)
        protocol.report_exited(worker, task.pk, exit_code=0, now=at)

    first = place(cloud_pool.pool, 1)[0]
    t0 = timezone.now()
    cloud.autoscale(t0)
    node = CloudNode.objects.get()
    worker, _ = protocol.enrol(
        node.enrolment_token, hostname=node.name, gpus=Decimal(1), mode="process", now=t0
    )
    run(worker, first, t0)
    cloud.autoscale(t0)
    node.refresh_from_db()
    assert node.state == "ready" and node.idle_since == t0
    run(worker, place(cloud_pool.pool, 1)[0], t0 + timedelta(seconds=299))
    assert not cloud.autoscale(t0 + timedelta(seconds=301))["burst"].get("released")
    node.refresh_from_db()
    assert node.idle_since == t0 + timedelta(seconds=299)
    summary = cloud.autoscale(t0 + timedelta(seconds=600))["burst"]
    assert summary["released"] == 1
    token = node.enrolment_token
    token.refresh_from_db()
    assert token.revoked_at is not None, "no daemon enrols again on a node being terminated"
