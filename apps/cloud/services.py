"""Writes for cloud pools, and the autoscaler's pass (``autoscale``). Leadership's cloud spend
caps are written in ``apps.cloud.spend_caps``, re-exported here for callers of this module.

Each pass, per enabled cloud pool: reconcile the nodes with what the provider reports (a node it
ended, e.g. a spot interruption, is marked terminated with its reason; an instance no live node
stands for is terminated), link nodes whose worker enrolled, release nodes that did not enrol within
the boot timeout and nodes idle for the idle timeout, then launch nodes while the GPUs of the work
placed on the pool (that some type can hold) exceed the GPUs of its launching, booting and ready
nodes, backing off a type whose nodes keep failing to enrol. The decisions are taken in one
transaction with the pool's row locked; the provider is called outside it, and every call can be
repeated without harm.
"""

import logging
import secrets
import time
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min, Q, Sum
from django.utils import timezone
from django.utils.text import slugify

from apps.cloud.models import (
    CloudNode,
    CloudPool,
    InstanceType,
)
from apps.cloud.spend_caps import cap_errors, remove_cap, set_cap  # noqa: F401 - callers use them here
from apps.core.gpus import MILLI
from apps.core.writes import validated_save
from apps.policies.models import ResourcePolicy
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool, Worker
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, counted_milli
from klique.cloud.providers import CapacityUnavailable, ProviderError, SpotRefused, open_provider

log = logging.getLogger("klique.cloud")
State = CloudNode.State
SPOT_TIMED_OUT = "spot not granted"
LIST_GRACE = timedelta(seconds=60)
# A launching row with no instance this long after the decision is taken for a launch lost (the pass
# died before or during the provider call). Longer than one launch call with its retries takes.
LAUNCH_GRACE = timedelta(seconds=90)
BOOT_TIMEOUT = "boot timeout"
MAX_BACKOFF = timedelta(hours=6)

_providers: dict[tuple[int, str, str], object] = {}


def create_cloud_pool(*, pool: Pool, provider: str, settings: dict, **fields) -> CloudPool:
    cloud_pool = validated_save(CloudPool(pool=pool, provider=provider, settings=settings, **fields))
    sync_capacity(cloud_pool)
    return cloud_pool


def add_instance_type(
    cloud_pool: CloudPool, *, name: str, gpus: int, max_count: int, **fields
) -> InstanceType:
    """Add a type and bring the pool's declared capacity up to its new maximum."""
    with transaction.atomic():
        instance_type = validated_save(
            InstanceType(cloud_pool=cloud_pool, name=name, gpus=gpus, max_count=max_count, **fields)
        )
        sync_capacity(cloud_pool)
    return instance_type


def maximum(cloud_pool: CloudPool) -> Decimal:
    """The most GPUs the pool can grow to: each type's most instances x GPUs per instance."""
    return Decimal(sum(t.max_count * t.gpus for t in cloud_pool.instance_types.all()))


def sync_capacity(cloud_pool: CloudPool) -> Decimal:
    """A cloud pool's declared capacity is its maximum (0 while disabled: nothing would launch for
    work placed there); the engine places on it up to that. Its claim timeout covers a node's boot:
    work placed there waits for the node launched for it instead of going back to its queue after
    the plain claim timeout."""
    capacity = maximum(cloud_pool) if cloud_pool.enabled else Decimal(0)
    claim_timeout_s = cloud_pool.boot_timeout_s + int(settings.WORKER_CLAIM_TIMEOUT_S)
    Pool.objects.filter(pk=cloud_pool.pool_id).update(capacity=capacity, claim_timeout_s=claim_timeout_s)
    cloud_pool.pool.capacity, cloud_pool.pool.claim_timeout_s = capacity, claim_timeout_s
    reason = "cloud pool's maximum" if cloud_pool.enabled else "cloud pool disabled"
    pools.record_capacity(cloud_pool.pool, reason=reason)
    return capacity


def provider_for(cloud_pool: CloudPool):
    """One provider object per pool and settings in this process (the local provider remembers the
    processes it started)."""
    key = (cloud_pool.pk, cloud_pool.provider, repr(sorted(cloud_pool.settings.items())))
    if key not in _providers:
        _providers[key] = open_provider(cloud_pool.provider, cloud_pool.settings)
    return _providers[key]


def user_data(node: CloudNode, instance_type: InstanceType, token: str) -> str:
    """The node's boot data: ``KEY=VALUE`` lines its image's ``klique-worker`` unit reads."""
    lines = {
        "KLIQUE_SERVER": settings.KLIQUE_PUBLIC_URL,
        "KLIQUE_ENROLMENT_TOKEN": token,
        "KLIQUE_WORKER_GPUS": str(instance_type.gpus),
        "KLIQUE_WORKER_HOSTNAME": node.name,
        **settings.CLOUD_NODE_ENVIRONMENT,
    }
    return "".join(f"{name}={value}\n" for name, value in lines.items())


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
    provider = provider_for(cloud_pool)
    done: Counter = Counter()
    _reconcile(cloud_pool, provider, now, done)
    with transaction.atomic():
        Pool.objects.select_for_update(no_key=True).filter(pk=cloud_pool.pool_id).first()
        _enrolled(cloud_pool, now, done)
        done["requeued"] = _requeue_capped(cloud_pool, capped, now)
        release = _timed_out(cloud_pool, now) + _idle(cloud_pool, now)
        demand, supply, launches = _launch_plan(cloud_pool, now, capped)
    done["released"] = len(release)
    if release:
        try:
            provider.terminate([node.instance_id for node in release if node.instance_id])
        except ProviderError as error:
            log.warning("%s: terminate failed, retried next pass: %s", cloud_pool.pool.name, error)
    for node, token in launches:
        if _launch(cloud_pool, provider, node, token, timezone.now()):
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
                _update(node, instance_id=found.instance_id, state=State.BOOTING)
            elif node.launched_at <= now - LAUNCH_GRACE:
                _end(node, now, "launch never completed")
                done["ended"] += 1
            continue
        instance = seen.get(node.instance_id)
        if instance is None and node.launched_at > now - LIST_GRACE:
            continue
        if instance is None or instance.state == "terminated":
            reason = node.reason if node.state == State.RELEASING else ""
            _end(node, now, reason or (instance.reason if instance else "") or "gone at the provider")
            done["ended"] += 1
        elif node.state == State.RELEASING:
            try:
                provider.terminate([node.instance_id])
            except ProviderError as error:
                log.warning("%s: terminate %s failed: %s", node.name, node.instance_id, error)
        elif instance.state == "stopping":
            _update(node, state=State.RELEASING, reason=instance.reason or "stopped by the provider")
            log.info("%s: the provider is stopping it: %s", node.name, node.reason)
        elif (
            node.market == CloudNode.Market.SPOT
            and instance.state == "pending"
            and node.launched_at <= now - timedelta(seconds=cloud_pool.spot_timeout_s)
        ):
            _release(node, f"{SPOT_TIMED_OUT} within {cloud_pool.spot_timeout_s} s", now)
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
            _update(node, state=State.READY, worker=worker, enrolled_at=worker.enrolled_at, idle_since=now)
            log.info("%s: enrolled as worker %s", node.name, worker.pk)
            done["enrolled"] += 1


def _timed_out(cloud_pool: CloudPool, now: datetime) -> list[CloudNode]:
    """Nodes not enrolled within the boot timeout, to be terminated (and so replaced)."""
    cutoff = now - timedelta(seconds=cloud_pool.boot_timeout_s)
    late = cloud_pool.nodes.filter(state=State.BOOTING, launched_at__lte=cutoff)
    released = []
    for node in late:
        _release(node, f"{BOOT_TIMEOUT}: not enrolled within {cloud_pool.boot_timeout_s} s", now)
        released.append(node)
    return released


def _idle(cloud_pool: CloudPool, now: datetime) -> list[CloudNode]:
    """Ready nodes whose worker held no task for the idle timeout, while no placed work of the pool
    waits for a claim. The worker is retired under its row lock first (a claim takes that lock
    too), so a node holding work is never released."""
    released = []
    unclaimed = Task.objects.filter(pool=cloud_pool.pool_id, state=Task.State.PLACED, worker__isnull=True)
    waiting = unclaimed.filter(gpus__lte=_largest(cloud_pool)).exists()
    for node in cloud_pool.nodes.filter(state=State.READY).select_related("worker"):
        _follow_restart(node)
        worker = (
            node.worker and Worker.objects.select_for_update(no_key=True).filter(pk=node.worker_id).first()
        )
        holds = bool(worker) and Task.objects.filter(worker=worker, state__in=Task.ACTIVE_STATES).exists()
        holds = holds or waiting  # placed work not yet claimed is on its way to a ready node
        if holds:
            if node.idle_since is not None:
                _update(node, idle_since=None)
            continue
        if node.idle_since is None:
            _update(node, idle_since=now)
            continue
        last_work = _last_work(worker)
        if last_work is not None and last_work > node.idle_since:
            _update(node, idle_since=last_work)  # work claimed and ended between two passes
        if (now - node.idle_since).total_seconds() < cloud_pool.idle_timeout_s:
            continue
        if worker is not None and worker.state != Worker.State.RETIRED:
            pools.retire(worker, now)
        _release(node, f"idle for {cloud_pool.idle_timeout_s} s", now)
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
        _update(node, worker=current)


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


def _launch_plan(
    cloud_pool: CloudPool, now: datetime, capped: frozenset[int] = frozenset()
) -> tuple[Decimal, Decimal, list]:
    """Nodes to launch while demand exceeds supply: saved as launching with a single-use
    enrolment token each (returned with it: only its hash is kept)."""
    all_types = list(cloud_pool.instance_types.order_by("rank", "pk"))
    largest = max((t.gpus for t in all_types), default=0)
    active = Task.objects.filter(pool=cloud_pool.pool_id, state__in=Task.ACTIVE_STATES)
    unfit = active.filter(gpus__gt=largest).count()
    if unfit:
        log.info("%s: %s placed tasks need more GPUs than any instance type has", cloud_pool.pool.name, unfit)
    tasks = active.filter(gpus__lte=largest)
    if capped:
        held = Q(state=Task.State.PLACED, worker__isnull=True, compute_resource__policy__in=capped)
        if tasks.filter(held).exists():
            log.info("%s: cloud spend cap reached: no node for capped work", cloud_pool.pool.name)
        tasks = tasks.exclude(held)
    demand = tasks.aggregate(milli=Sum(counted_milli()))["milli"] or 0
    live = list(cloud_pool.nodes.filter(state__in=CloudNode.LIVE_STATES).select_related("instance_type"))
    supply = sum(n.gpus * MILLI for n in live if n.state in CloudNode.SUPPLY_STATES)
    counts = Counter(n.instance_type_id for n in live)
    waiting = tasks.filter(state=Task.State.PLACED, worker__isnull=True).aggregate(
        most=Max("gpus"), least=Min("gpus")
    )
    types = [t for t in all_types if not _backing_off(cloud_pool, t, now)]
    launches = []
    while demand > supply:
        room = [t for t in types if counts[t.pk] < t.max_count]
        if not room:
            log.info(
                "%s: short of %s GPUs, every type at its most or backing off",
                cloud_pool.pool.name, _gpus(demand - supply),
            )  # fmt: skip
            break
        chosen = _fitting(room, waiting["most"]) or _fitting(room, waiting["least"])
        if chosen is None:
            log.info("%s: no type with room fits the work waiting for a node", cloud_pool.pool.name)
            break
        node, token = _new_node(cloud_pool, chosen, now)
        log.info(
            "%s: launch %s (%s): demand %s GPUs, supply %s",
            cloud_pool.pool.name, node.name, chosen.name, _gpus(demand), _gpus(supply),
        )  # fmt: skip
        launches.append((node, token))
        counts[chosen.pk] += 1
        supply += chosen.gpus * MILLI
    return _gpus(demand), _gpus(supply), launches


def _fitting(types: list[InstanceType], gpus) -> InstanceType | None:
    """The first type whose nodes hold a task of ``gpus`` per node (None: no such task or type)."""
    if gpus is None:
        return None
    return next((t for t in types if t.gpus >= gpus), None)


def _largest(cloud_pool: CloudPool) -> int:
    """The GPUs of the pool's largest instance type: work needing more per node never fits a node."""
    return cloud_pool.instance_types.aggregate(most=Max("gpus"))["most"] or 0


def _backing_off(cloud_pool: CloudPool, instance_type: InstanceType, now: datetime) -> bool:
    """A type whose latest nodes all failed to enrol within the boot timeout (a bad image, a wrong
    ``KLIQUE_PUBLIC_URL``, a firewall) is not launched again until ``boot_timeout_s x 2**n`` after
    the latest of those ``n`` launches (at most ``MAX_BACKOFF``)."""
    ended = instance_type.nodes.filter(state__in=(State.RELEASING, State.TERMINATED))
    streak = []
    for node in ended.order_by("-launched_at", "-pk")[:10]:
        if node.enrolled_at is not None or not node.reason.startswith(BOOT_TIMEOUT):
            break
        streak.append(node)
    if not streak:
        return False
    wait = min(timedelta(seconds=cloud_pool.boot_timeout_s * 2 ** len(streak)), MAX_BACKOFF)
    if now < streak[0].launched_at + wait:
        log.info(
            "%s: %s backing off after %s boot timeouts", cloud_pool.pool.name, instance_type.name, len(streak)
        )
        return True
    return False


def _new_node(cloud_pool: CloudPool, instance_type: InstanceType, now: datetime) -> tuple[CloudNode, str]:
    label = slugify(cloud_pool.pool.name).replace("_", "-")[:40].strip("-") or "cloud"
    name = f"{label}-{secrets.token_hex(4)}"  # its hostname: RFC 1123
    token = EnrolmentToken(
        pool=cloud_pool.pool,
        name=f"cloud node {name}",
        single_use=True,
        expires_at=now + timedelta(seconds=cloud_pool.boot_timeout_s + 60),
    )
    raw = pools.issue_enrolment_token(token, now=now)
    market = CloudNode.Market.SPOT if instance_type.spot else CloudNode.Market.ON_DEMAND
    node = CloudNode.objects.create(
        cloud_pool=cloud_pool,
        instance_type=instance_type,
        instance_type_name=instance_type.name,
        gpus=instance_type.gpus,
        market=market,
        name=name,
        launched_at=now,
        enrolment_token=token,
    )
    return node, raw


def _launch(cloud_pool: CloudPool, provider, node: CloudNode, token: str, now: datetime) -> bool:
    """Spot first where the type allows (and spot was not just timed out), on-demand at once when
    spot is refused, the next type with room when on-demand is refused for capacity."""
    types = list(cloud_pool.instance_types.order_by("rank", "pk"))
    start = next(i for i, t in enumerate(types) if t.pk == node.instance_type_id)
    attempts = []
    for instance_type in types[start:]:
        if instance_type.pk != node.instance_type_id and not _take_type(cloud_pool, node, instance_type, now):
            continue
        markets = ["spot", "on-demand"] if _spot_first(cloud_pool, instance_type, now) else ["on-demand"]
        for market in markets:
            data = user_data(node, instance_type, token)
            try:
                instance = provider.launch(cloud_pool.pool.name, node.name, instance_type.name, market, data)
            except ProviderError as error:
                attempts.append(
                    {
                        "type": instance_type.name,
                        "market": market,
                        "code": error.code,
                        "message": error.message,
                    }
                )
                log.info("%s: %s %s refused: %s", node.name, instance_type.name, market, error)
                if isinstance(error, SpotRefused):
                    continue
                if isinstance(error, CapacityUnavailable):
                    break
                _update(node, attempts=attempts)
                _end(node, timezone.now(), f"launch failed: {error.code}: {error.message}"[:300])
                return False
            attempts.append(
                {"type": instance_type.name, "market": market, "instance_id": instance.instance_id}
            )
            kept = CloudNode.objects.filter(pk=node.pk, state__in=(State.LAUNCHING, State.BOOTING)).update(
                instance_id=instance.instance_id, market=market, state=State.BOOTING, attempts=attempts
            )
            if not kept:  # ended meanwhile (taken for a lost launch): the instance is not wanted
                log.warning("%s: ended during its launch; terminating %s", node.name, instance.instance_id)
                try:
                    provider.terminate([instance.instance_id])
                except ProviderError as error:  # the orphan rule terminates it on a later pass
                    log.warning("%s: terminate %s failed: %s", node.name, instance.instance_id, error)
                return False
            node.refresh_from_db()
            log.info("%s: launched %s %s as %s", node.name, instance_type.name, market, instance.instance_id)
            return True
    _update(node, attempts=attempts)
    _end(node, timezone.now(), "no capacity: every type with room was refused")
    return False


def _take_type(cloud_pool: CloudPool, node: CloudNode, instance_type: InstanceType, now: datetime) -> bool:
    """Move a node falling back to another type onto it, if that type has room and is not backing
    off: under the pool's lock, so that two passes falling back at once never exceed its
    ``max_count``."""
    with transaction.atomic():
        Pool.objects.select_for_update(no_key=True).filter(pk=cloud_pool.pool_id).first()
        live = instance_type.nodes.filter(state__in=CloudNode.LIVE_STATES).count()
        if live >= instance_type.max_count or _backing_off(cloud_pool, instance_type, now):
            return False
        _update(
            node, instance_type=instance_type, instance_type_name=instance_type.name, gpus=instance_type.gpus
        )
    return True


def _spot_first(cloud_pool: CloudPool, instance_type: InstanceType, now: datetime) -> bool:
    """Spot, unless a spot node of this type was not granted within the spot timeout lately."""
    if not instance_type.spot:
        return False
    recent = now - timedelta(seconds=cloud_pool.boot_timeout_s)
    timed_out = instance_type.nodes.filter(reason__startswith=SPOT_TIMED_OUT, launched_at__gte=recent)
    return not timed_out.exists()


def _release(node: CloudNode, reason: str, now: datetime) -> None:
    """Terminate asked. Its enrolment token is revoked (no daemon enrols again on a machine being
    terminated); a node released before it was ready is shut out: any worker that enrolled with its
    name meanwhile is retired too."""
    if node.state != State.READY:
        _shut_out(node, now)
    elif node.enrolment_token_id:
        pools.revoke_enrolment_token(node.enrolment_token, now)
    _update(node, state=State.RELEASING, reason=reason)
    log.info("%s: release: %s", node.name, reason)


def _shut_out(node: CloudNode, now: datetime) -> None:
    if node.enrolment_token_id:
        pools.revoke_enrolment_token(node.enrolment_token, now)
    late = Worker.objects.filter(
        pool=node.cloud_pool.pool_id, hostname=node.name, state=Worker.State.ACTIVE
    ).exclude(pk=node.worker_id or 0)
    for worker in late:
        pools.retire(worker, now)


def _end(node: CloudNode, now: datetime, reason: str) -> None:
    """Terminated. Its unused enrolment token is revoked; its worker's tasks are left to the worker
    sweep, which requeues them once the worker is lost."""
    _update(node, state=State.TERMINATED, terminated_at=now, reason=reason[:300])
    _shut_out(node, now)
    log.info("%s: terminated: %s", node.name, node.reason)


def _update(node: CloudNode, **fields) -> None:
    for name, value in fields.items():
        setattr(node, name, value)
    node.save(update_fields=list(fields))


def _gpus(milli: int) -> Decimal:
    return Decimal(milli) / MILLI


def release_all(cloud_pool: CloudPool, reason: str, wait_s: float) -> list[str]:
    """Terminate the pool's nodes that have not ended (pending, running or stopping), wait until the
    provider reports them terminated (the local provider SIGKILLs a node still running
    ``kill_after_s`` after its SIGTERM), then record their end as the autoscaler's reconcile does.
    Returns the nodes not ended after ``wait_s``."""
    provider = provider_for(cloud_pool)
    name = cloud_pool.pool.name
    now = timezone.now()
    for node in cloud_pool.nodes.filter(state__in=CloudNode.SUPPLY_STATES):
        _release(node, reason, now)
    running = [i for i in provider.describe(name) if i.state != "terminated"]
    if running:
        provider.terminate([i.instance_id for i in running])
    deadline = time.monotonic() + wait_s
    while running and time.monotonic() < deadline:
        time.sleep(0.5)
        running = [i for i in provider.describe(name) if i.state != "terminated"]
    _reconcile(cloud_pool, provider, timezone.now(), Counter())
    return [i.node for i in running]
