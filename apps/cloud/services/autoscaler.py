"""The autoscaler's pass (``autoscale``). Each pass, per enabled cloud pool: reconcile the nodes
with what the provider reports (a node it ended, e.g. a spot interruption, is marked terminated with
its reason; an instance no live node stands for is terminated), link nodes whose worker enrolled,
release nodes that did not enrol within the boot timeout and nodes idle for the idle timeout, then
launch nodes while the GPUs of the work placed on the pool (that some type can hold) exceed the GPUs
of its launching, booting and ready nodes, backing off a type whose nodes keep failing to enrol.
The decisions are taken in one transaction with the pool's row locked; the provider is called
outside it, and every call can be repeated without harm."""

import logging
import time
from collections import Counter
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.cloud.models import (
    CloudNode,
    CloudPool,
)
from apps.cloud.services import launching, node_rows
from apps.cloud.services import pools as writes
from apps.policies.models import ResourcePolicy
from apps.pools.models import Pool, Worker
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from apps.workers import services as protocol
from klique.cloud.providers import ProviderError

log = logging.getLogger("klique.cloud")
State = CloudNode.State
LIST_GRACE = timedelta(seconds=60)
# A launching row with no instance this long after the decision is taken for a launch lost (the pass
# died before or during the provider call). Longer than one launch call with its retries takes.
LAUNCH_GRACE = timedelta(seconds=90)


def autoscale(now: datetime | None = None) -> dict[str, dict]:
    """One pass over every enabled cloud pool; per pool what it did (or the error that stopped it)."""
    now = now or timezone.now()
    summary = {}
    capped = _capped_policies(now)
    for cloud_pool in CloudPool.objects.filter(enabled=True).select_related("pool").order_by("pk"):
        try:
            summary[cloud_pool.pool.name] = scale(cloud_pool, now, capped)
        except Exception as error:  # one pool's failure must not stop the others
            log.exception("autoscale %s failed", cloud_pool.pool.name)
            summary[cloud_pool.pool.name] = {"error": f"{type(error).__name__}: {error}"}
    return summary


def _capped_policies(now: datetime) -> frozenset[int]:
    """The policies of every group a reached cloud spend cap covers (its group's subtree)."""
    from apps.cloud import caps

    reached = caps.reached_caps_now(now)
    if not reached:
        return frozenset()
    policies = ResourcePolicy.objects.values_list("pk", flat=True)
    if not any(cap.everyone for cap in reached):
        policies = policies.filter(group__in=set().union(*(cap.groups for cap in reached)))
    return frozenset(policies)


def scale(cloud_pool: CloudPool, now: datetime, capped: frozenset[int] = frozenset()) -> dict:
    """One pool's pass. Placed work of `capped` policies that no node has claimed yet goes back to
    its queue (a session, which is never requeued, is left out of the demand): a reached cloud
    spend cap launches no node for its scope, and its work takes none launched for others."""
    provider = writes.provider_for(cloud_pool)
    done: Counter = Counter()
    _reconcile(cloud_pool, provider, now, done)
    with transaction.atomic():
        Pool.objects.select_for_update(no_key=True).filter(pk=cloud_pool.pool_id).first()
        _enrolled(cloud_pool, now, done)
        done["requeued"] = _requeue_capped(cloud_pool, capped, now)
        release = _timed_out(cloud_pool, now) + _idle(cloud_pool, now)
        demand, supply, launches = launching.launch_plan(cloud_pool, now, capped)
    done["released"] = len(release)
    if release:
        try:
            provider.terminate([node.instance_id for node in release if node.instance_id])
        except ProviderError as error:
            log.warning("%s: terminate failed, retried next pass: %s", cloud_pool.pool.name, error)
    for node, token in launches:
        if launching.launch(cloud_pool, provider, node, token, timezone.now()):
            done["launched"] += 1
    return {"demand": str(demand), "supply": str(supply), **done}


def _reconcile(cloud_pool: CloudPool, provider, now: datetime, done: Counter) -> None:
    """Bring the nodes' states in line with the provider's view. The nodes are read before the
    provider is asked, so a launch that lands in between is not taken for a node gone; a node the
    provider does not list is taken for gone only after ``LIST_GRACE`` (EC2's listing is eventually
    consistent)."""
    nodes = list(cloud_pool.nodes.filter(state__in=CloudNode.LIVE_STATES).select_related("instance_type"))
    try:
        seen = {i.instance_id: i for i in provider.describe(cloud_pool.pool.name)}
    except ProviderError as error:
        log.warning("%s: describe failed, nodes left as they are: %s", cloud_pool.pool.name, error)
        return
    by_name = {i.node: i for i in seen.values()}
    _terminate_orphans(cloud_pool, provider, seen, now)
    for node in nodes:
        if not node.instance_id:
            found = by_name.get(node.name)
            if found is not None:
                node_rows.update(node, instance_id=found.instance_id, state=State.BOOTING)
            elif node.launched_at <= now - LAUNCH_GRACE:
                node_rows.end(node, now, "launch never completed")
                done["ended"] += 1
            continue
        instance = seen.get(node.instance_id)
        if instance is None and node.launched_at > now - LIST_GRACE:
            continue
        if instance is None or instance.state == "terminated":
            reason = node.reason if node.state == State.RELEASING else ""
            node_rows.end(
                node, now, reason or (instance.reason if instance else "") or "gone at the provider"
            )
            done["ended"] += 1
        elif node.state == State.RELEASING:
            try:
                provider.terminate([node.instance_id])
            except ProviderError as error:
                log.warning("%s: terminate %s failed: %s", node.name, node.instance_id, error)
        elif instance.state == "stopping":
            node_rows.update(node, state=State.RELEASING, reason=instance.reason or "stopped by the provider")
            log.info("%s: the provider is stopping it: %s", node.name, node.reason)
        elif (
            node.market == CloudNode.Market.SPOT
            and instance.state == "pending"
            and node.launched_at <= now - timedelta(seconds=cloud_pool.spot_timeout_s)
        ):
            node_rows.release(node, f"{node_rows.SPOT_TIMED_OUT} within {cloud_pool.spot_timeout_s} s", now)
            try:
                provider.terminate([node.instance_id])
            except ProviderError as error:
                log.warning("%s: terminate %s failed: %s", node.name, node.instance_id, error)


def _terminate_orphans(cloud_pool: CloudPool, provider, seen: dict, now: datetime) -> None:
    """Terminate live instances of the pool that no live node stands for, e.g. a launch carried out
    whose answer was lost. Only those launched more than ``LIST_GRACE`` ago: a launch that lands
    while this pass runs is not one (its node is read again here, after ``describe``)."""
    live = cloud_pool.nodes.filter(state__in=CloudNode.LIVE_STATES)
    known_ids = set(live.values_list("instance_id", flat=True))
    known_names = set(live.values_list("name", flat=True))
    orphans = [
        i.instance_id
        for i in seen.values()
        if i.live
        and i.instance_id not in known_ids
        and i.node not in known_names
        and i.launched_at <= now - LIST_GRACE
    ]
    if not orphans:
        return
    log.warning("%s: terminating instances no live node stands for: %s", cloud_pool.pool.name, orphans)
    try:
        provider.terminate(orphans)
    except ProviderError as error:
        log.warning("%s: terminate of orphans failed, retried next pass: %s", cloud_pool.pool.name, error)


def _enrolled(cloud_pool: CloudPool, now: datetime, done: Counter) -> None:
    for node in cloud_pool.nodes.filter(state=State.BOOTING):
        worker = (
            Worker.objects.filter(pool=cloud_pool.pool_id, hostname=node.name, state=Worker.State.ACTIVE)
            .order_by("-pk")
            .first()
        )
        if worker is not None:
            node_rows.update(
                node, state=State.READY, worker=worker, enrolled_at=worker.enrolled_at, idle_since=now
            )
            log.info("%s: enrolled as worker %s", node.name, worker.pk)
            done["enrolled"] += 1


def _timed_out(cloud_pool: CloudPool, now: datetime) -> list[CloudNode]:
    """Nodes not enrolled within the boot timeout, to be terminated (and so replaced)."""
    cutoff = now - timedelta(seconds=cloud_pool.boot_timeout_s)
    late = cloud_pool.nodes.filter(state=State.BOOTING, launched_at__lte=cutoff)
    released = []
    for node in late:
        node_rows.release(
            node, f"{node_rows.BOOT_TIMEOUT}: not enrolled within {cloud_pool.boot_timeout_s} s", now
        )
        released.append(node)
    return released


def _idle(cloud_pool: CloudPool, now: datetime) -> list[CloudNode]:
    """Ready nodes whose worker held no task for the idle timeout, while no placed work of the pool
    waits for a claim. The worker is retired under its row lock first (a claim takes that lock
    too), so a node holding work is never released."""
    released = []
    unclaimed = Task.objects.filter(pool=cloud_pool.pool_id, state=Task.State.PLACED, worker__isnull=True)
    waiting = unclaimed.filter(gpus__lte=launching.largest(cloud_pool)).exists()
    for node in cloud_pool.nodes.filter(state=State.READY).select_related("worker"):
        _follow_restart(node)
        worker = (
            node.worker and Worker.objects.select_for_update(no_key=True).filter(pk=node.worker_id).first()
        )
        holds = bool(worker) and Task.objects.filter(worker=worker, state__in=Task.ACTIVE_STATES).exists()
        holds = holds or waiting  # placed work not yet claimed is on its way to a ready node
        if holds:
            if node.idle_since is not None:
                node_rows.update(node, idle_since=None)
            continue
        if node.idle_since is None:
            node_rows.update(node, idle_since=now)
            continue
        last_work = _last_work(worker)
        if last_work is not None and last_work > node.idle_since:
            node_rows.update(node, idle_since=last_work)  # work claimed and ended between two passes
        if (now - node.idle_since).total_seconds() < cloud_pool.idle_timeout_s:
            continue
        if worker is not None and worker.state != Worker.State.RETIRED:
            protocol.retire(worker, now)
        node_rows.release(node, f"idle for {cloud_pool.idle_timeout_s} s", now)
        released.append(node)
    return released


def _follow_restart(node: CloudNode) -> None:
    """A node's daemon that restarted enrolled again under the node's name: link its new worker."""
    if node.worker is not None and node.worker.state == Worker.State.ACTIVE:
        return
    current = (
        Worker.objects.filter(pool=node.cloud_pool.pool_id, hostname=node.name, state=Worker.State.ACTIVE)
        .order_by("-pk")
        .first()
    )
    if current is not None:
        node_rows.update(node, worker=current)


def _last_work(worker: Worker | None) -> datetime | None:
    """When the worker last claimed or ended a task."""
    if worker is None:
        return None
    at = Task.objects.filter(worker=worker).aggregate(claimed=Max("claimed_at"), ended=Max("ended_at"))
    return max((value for value in at.values() if value is not None), default=None)


def _requeue_capped(cloud_pool: CloudPool, capped: frozenset[int], now: datetime) -> int:
    if not capped:
        return 0
    held = list(
        Task.objects.select_for_update(no_key=True, skip_locked=True)
        .filter(
            pool=cloud_pool.pool_id,
            state=Task.State.PLACED,
            worker__isnull=True,
            kind=Task.Kind.BATCH,
            compute_resource__policy__in=capped,
        )
        .order_by("pk")
    )
    if held:
        log.info(
            "%s: cloud spend cap reached: %s placed tasks back to their queues",
            cloud_pool.pool.name,
            len(held),
        )
        lifecycle.requeue_lost(held, Task.StopReason.CLOUD_CAP, now, ended_at=now)
    return len(held)


def release_all(cloud_pool: CloudPool, reason: str, wait_s: float) -> list[str]:
    """Terminate the pool's nodes that have not ended (pending, running or stopping), wait until the
    provider reports them terminated (the local provider SIGKILLs a node still running
    ``kill_after_s`` after its SIGTERM), then record their end as the autoscaler's reconcile does.
    Returns the nodes not ended after ``wait_s``."""
    provider = writes.provider_for(cloud_pool)
    name = cloud_pool.pool.name
    now = timezone.now()
    for node in cloud_pool.nodes.filter(state__in=CloudNode.SUPPLY_STATES):
        node_rows.release(node, reason, now)
    running = [i for i in provider.describe(name) if i.state != "terminated"]
    if running:
        provider.terminate([i.instance_id for i in running])
    deadline = time.monotonic() + wait_s
    while running and time.monotonic() < deadline:
        time.sleep(0.5)
        running = [i for i in provider.describe(name) if i.state != "terminated"]
    _reconcile(cloud_pool, provider, timezone.now(), Counter())
    return [i.node for i in running]
