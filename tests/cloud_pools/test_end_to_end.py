"""End to end with the local provider: the live server on a real port, tasks submitted through the
API, the engine's pass and the autoscaler driven here, a ``klique-worker`` process serving the owned
pool and each cloud node a ``klique-worker`` process that enrols with its single-use token."""

from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.utils import timezone

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.cloud import services as cloud
from apps.cloud.costs import cloud_spend
from apps.cloud.models import CloudNode
from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool, Worker
from apps.pricing.models import NodePrice
from apps.tasks.models import Task
from apps.workers import services as protocol
from tests.cloud_pools.conftest import alive, node_pid, process_environment, wait_for
from tests.factories import GpuTypeFactory, GroupFactory, UserFactory
from tests.worker import live

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def estate(settings, live_server, local_cloud, tmp_path):
    """An owned pool of 1 GPU with its worker process, a cloud pool behind it in the profile, and a
    member's API token."""
    settings.KLIQUE_PUBLIC_URL = live_server.url
    settings.WORKER_HEARTBEAT_S = 0.5
    settings.WORKER_CLAIM_TIMEOUT_S = 300
    gpu = GpuTypeFactory()
    owned = Pool.objects.create(name="owned", kind=Pool.Kind.BAREMETAL, gpu_type=gpu, capacity=1)
    cloud_pool = local_cloud(name="burst", idle_timeout_s=2)
    profile = policies.create_profile(name="1gpu", gpus=1, pools=[owned, cloud_pool.pool])
    group = GroupFactory(name="Vision", slug="vision")
    policy = policies.create_policy(group=group, reservation=2, limit=2)
    resource = policies.connect(policy=policy, profile=profile, name="vision-1gpu")
    user = UserFactory(username="ada")
    accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
    api_token = api_token_value = accounts.create_api_token(user=user, name="e2e")[1]
    enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=owned, name="rack"), now=timezone.now())
    owned_worker = live.worker(live_server.url, enrolment, "owned-1", tmp_path)

    class Estate:
        server = live_server.url
        api_token = api_token_value

        def __init__(self):
            self.owned, self.cloud_pool, self.resource = owned, cloud_pool, resource

        def submit(self, command: str) -> int:
            answer = httpx.post(
                f"{self.server}/api/v1/tasks/",
                json={"compute_resource": resource.name, "command": command},
                headers={"Authorization": f"Bearer {api_token}"},
                timeout=30,
            )
            assert answer.status_code == 201, answer.text
            return answer.json()["id"]

    yield Estate()
    owned_worker.stop()


def drive(until, timeout: float = 90, what: str = "the condition"):
    """The control plane's loop, here: the engine's pass and the autoscaler, until ``until()``."""

    def step():
        engine.run_pass()
        cloud.autoscale()
        return until()

    return wait_for(step, timeout=timeout, every=0.3, what=what)


def test_work_beyond_the_owned_pool_runs_on_a_new_cloud_node_charged_from_placement_then_the_node_goes(
    estate,
):
    first = estate.submit("sleep 1")
    second = estate.submit("sleep 1")
    drive(lambda: Task.objects.filter(state=Task.State.PLACED).count() == 2, what="both placed")
    on_owned, on_cloud = (Task.objects.get(pk=pk) for pk in (first, second))
    assert (on_owned.pool_id, on_cloud.pool_id) == (estate.owned.pk, estate.cloud_pool.pool_id)

    node = drive(lambda: CloudNode.objects.filter(state="ready").first(), what="a cloud node to enrol")
    assert node.market == "spot" and node.worker.hostname == node.name
    assert node.launched_at >= on_cloud.placed_at, "the node was launched for work already placed"
    token = node.enrolment_token
    token.refresh_from_db()
    assert token.single_use and token.used_at is not None

    raw = process_environment(node_pid(estate.cloud_pool, node))["KLIQUE_ENROLMENT_TOKEN"]
    again = httpx.post(
        f"{estate.server}/api/v1/workers/enrol",
        json={"hostname": "intruder", "gpus": "1"},
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    )
    assert again.status_code == 403 and "can no longer be used" in again.json()["detail"]

    drive(
        lambda: Task.objects.filter(pk__in=[first, second], state=Task.State.SUCCEEDED).count() == 2,
        what="both tasks to succeed",
    )
    on_cloud.refresh_from_db()
    assert on_cloud.worker_id == node.worker_id
    [interval] = UsageInterval.objects.filter(task=on_cloud)
    assert interval.start == on_cloud.placed_at and interval.pool_id == estate.cloud_pool.pool_id
    assert interval.end is not None and interval.start < node.enrolled_at < interval.end
    pid = node_pid(estate.cloud_pool, node)

    node = drive(
        lambda: CloudNode.objects.filter(pk=node.pk, state="terminated").first(),
        what="the idle node to be terminated",
    )
    assert node.reason == "idle for 2 s"
    wait_for(lambda: not alive(pid), timeout=30, what="the node's process to end")
    assert CloudNode.objects.count() == 1, "no node was launched beyond what the work needed"

    # Its node-hours are a cost line in the ledger: at 3600 EUR a node-hour, a euro a second.
    NodePrice.objects.create(
        instance_type=node.instance_type.name,
        market="spot",
        currency="EUR",
        per_node_hour=Decimal("3600"),
        effective_from=node.launched_at.date(),
    )
    spend = cloud_spend(node.launched_at - timedelta(hours=1), timezone.now(), "EUR")
    [cost] = spend.nodes
    life = (node.terminated_at - node.launched_at).total_seconds()
    assert cost.node == node.name and abs(cost.seconds - Decimal(life)) < Decimal("0.001")
    assert cost.idle_seconds >= 2, "idle from the task's end to the release, at least the idle timeout"
    busy = (min(interval.end, node.terminated_at) - node.launched_at).total_seconds()
    group = estate.resource.policy.group_id
    assert abs(spend.by_group[group] - Decimal(busy)) <= Decimal("0.01"), (
        "1 GPU of 1: the task pays the busy part"
    )
    assert abs(spend.idle - cost.idle_seconds) <= Decimal("0.01")
    assert spend.total == spend.idle + spend.attributed + spend.spare


def test_a_used_single_use_token_enrols_again_only_from_its_own_host_until_revoked(estate):
    now = timezone.now()
    token = EnrolmentToken(
        pool=estate.owned, name="one node", single_use=True, expires_at=now + timedelta(seconds=5)
    )
    raw = pools.issue_enrolment_token(token, now=now)

    def enrol(hostname):
        return httpx.post(
            f"{estate.server}/api/v1/workers/enrol",
            json={"hostname": hostname, "gpus": "1"},
            headers={"Authorization": f"Bearer {raw}"},
            timeout=30,
        )

    assert enrol("node-a").status_code == 201
    refused = enrol("node-b")
    assert refused.status_code == 403, refused.text
    EnrolmentToken.objects.filter(pk=token.pk).update(expires_at=now - timedelta(seconds=1))
    again = enrol("node-a")  # its daemon restarted, after the token's expiry
    assert again.status_code == 201, again.text
    assert Worker.objects.filter(hostname="node-a", state=Worker.State.ACTIVE).count() == 1
    stale = EnrolmentToken.objects.get(pk=token.pk)
    stale.used_at = None  # as a concurrent enrolment read it before the first one committed
    with pytest.raises(protocol.InvalidToken):
        protocol.enrol(stale, hostname="node-c", gpus=1, mode="process", now=now)
    pools.revoke_enrolment_token(stale, timezone.now())
    assert enrol("node-a").status_code == 401


def test_a_reached_cloud_spend_cap_launches_no_node_and_waiting_work_says_why_until_it_is_raised(
    estate, settings
):
    from datetime import UTC, datetime

    from apps.cloud.caps import month_bounds

    settings.CLOUD_CAP_CHECK_S = 0
    organisation = GroupFactory(name="Acme", slug="acme", kind="organisation")
    research = GroupFactory(name="Research", slug="research", kind="business_unit", parent=organisation)
    estate.resource.policy.group.__class__.objects.filter(pk=estate.resource.policy.group_id).update(
        parent=research
    )
    now = timezone.now()
    month_start, next_month = month_bounds(now)
    instance_type = estate.cloud_pool.instance_types.get()
    for market in ("spot", "on-demand"):
        NodePrice.objects.create(
            instance_type=instance_type.name,
            market=market,
            currency="EUR",
            per_node_hour=Decimal("1.00"),
            effective_from=month_start.date(),
        )
    # A node that ran a minute this month, holding nothing: about 0.0167 EUR, all of it idle.
    CloudNode.objects.create(
        cloud_pool=estate.cloud_pool,
        instance_type=instance_type,
        market="spot",
        name="burst-earlier",
        state="terminated",
        launched_at=max(month_start, now - timedelta(seconds=60)),
        terminated_at=now,
        reason="idle for 60 s",
    )
    admin = UserFactory(username="cfo")
    cloud.set_cap(organisation, "0.01", "EUR", actor=admin, via="portal")

    # The first holds the owned pool to the end (on a loaded machine a 1 s task could end before the
    # cap is raised, and the second would then run on the owned pool instead of a new node).
    first = estate.submit("sleep 120")
    second = estate.submit("sleep 1")
    waiting = drive(
        lambda: Task.objects.filter(pk=second, verdict__rule="cloud_cap_reached").first(),
        what="the second task to wait on the cloud spend cap",
    )
    assert Task.objects.get(pk=first).pool_id == estate.owned.pk
    assert waiting.state == Task.State.QUEUED and waiting.pool_id is None
    assert waiting.verdict["pools"] == ["burst"] and waiting.verdict["group"] == "Acme"
    assert datetime.fromisoformat(waiting.verdict["reset_at"]) == next_month.astimezone(UTC)
    assert waiting.verdict["message"].startswith("Cloud spend cap reached for Acme")
    assert next_month.strftime("%Y-%m-%d 00:00 UTC") in waiting.verdict["message"]
    seen = httpx.get(
        f"{estate.server}/api/v1/tasks/{second}/",
        headers={"Authorization": f"Bearer {estate.api_token}"},
        timeout=30,
    ).json()
    assert seen["verdict"]["rule"] == "cloud_cap_reached"
    assert cloud.autoscale()["burst"]["demand"] == "0"
    assert CloudNode.objects.count() == 1, "no node launched past the cap"

    cloud.set_cap(organisation, "1000", "EUR", actor=admin, via="portal")
    drive(
        lambda: (
            Task.objects.filter(pk=second, pool=estate.cloud_pool.pool).exists()
            and CloudNode.objects.exclude(name="burst-earlier").exists()
        ),
        what="the raised cap to let the work onto a new cloud node",
    )
