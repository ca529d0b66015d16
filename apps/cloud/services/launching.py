"""The autoscaler's launches: the plan (which instance types for the GPUs of the work placed and not
yet covered, backing off a type whose nodes keep failing to enrol), a node's row and enrolment token,
and the provider call (spot first where allowed, then on demand)."""

import logging
import secrets
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Max, Min, Q, Sum
from django.utils import timezone
from django.utils.text import slugify

from apps.cloud.models import (
    CloudNode,
    CloudPool,
    InstanceType,
)
from apps.cloud.services import node_rows
from apps.cloud.services import pools as writes
from apps.core.gpus import MILLI
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool
from apps.tasks.models import Task, counted_milli
from klique.cloud.providers import CapacityUnavailable, ProviderError, SpotRefused

log = logging.getLogger("klique.cloud")
State = CloudNode.State
MAX_BACKOFF = timedelta(hours=6)


def launch_plan(
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
    types = [t for t in all_types if not backing_off(cloud_pool, t, now)]
    launches = []
    while demand > supply:
        room = [t for t in types if counts[t.pk] < t.max_count]
        if not room:
            log.info(
                "%s: short of %s GPUs, every type at its most or backing off",
                cloud_pool.pool.name, gpus(demand - supply),
            )  # fmt: skip
            break
        chosen = fitting(room, waiting["most"]) or fitting(room, waiting["least"])
        if chosen is None:
            log.info("%s: no type with room fits the work waiting for a node", cloud_pool.pool.name)
            break
        node, token = new_node(cloud_pool, chosen, now)
        log.info(
            "%s: launch %s (%s): demand %s GPUs, supply %s",
            cloud_pool.pool.name, node.name, chosen.name, gpus(demand), gpus(supply),
        )  # fmt: skip
        launches.append((node, token))
        counts[chosen.pk] += 1
        supply += chosen.gpus * MILLI
    return gpus(demand), gpus(supply), launches


def fitting(types: list[InstanceType], gpus) -> InstanceType | None:
    """The first type whose nodes hold a task of ``gpus`` per node (None: no such task or type)."""
    if gpus is None:
        return None
    return next((t for t in types if t.gpus >= gpus), None)


def largest(cloud_pool: CloudPool) -> int:
    """The GPUs of the pool's largest instance type: work needing more per node never fits a node."""
    return cloud_pool.instance_types.aggregate(most=Max("gpus"))["most"] or 0


def backing_off(cloud_pool: CloudPool, instance_type: InstanceType, now: datetime) -> bool:
    """A type whose latest nodes all failed to enrol within the boot timeout (a bad image, a wrong
    ``KLIQUE_PUBLIC_URL``, a firewall) is not launched again until ``boot_timeout_s x 2**n`` after
    the latest of those ``n`` launches (at most ``MAX_BACKOFF``)."""
    ended = instance_type.nodes.filter(state__in=(State.RELEASING, State.TERMINATED))
    streak = []
    for node in ended.order_by("-launched_at", "-pk")[:10]:
        if node.enrolled_at is not None or not node.reason.startswith(node_rows.BOOT_TIMEOUT):
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


def new_node(cloud_pool: CloudPool, instance_type: InstanceType, now: datetime) -> tuple[CloudNode, str]:
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


def launch(cloud_pool: CloudPool, provider, node: CloudNode, token: str, now: datetime) -> bool:
    """Spot first where the type allows (and spot was not just timed out), on-demand at once when
    spot is refused, the next type with room when on-demand is refused for capacity."""
    types = list(cloud_pool.instance_types.order_by("rank", "pk"))
    start = next(i for i, t in enumerate(types) if t.pk == node.instance_type_id)
    attempts = []
    for instance_type in types[start:]:
        if instance_type.pk != node.instance_type_id and not take_type(cloud_pool, node, instance_type, now):
            continue
        markets = ["spot", "on-demand"] if spot_first(cloud_pool, instance_type, now) else ["on-demand"]
        for market in markets:
            data = writes.user_data(node, instance_type, token)
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
                node_rows.update(node, attempts=attempts)
                node_rows.end(node, timezone.now(), f"launch failed: {error.code}: {error.message}"[:300])
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
    node_rows.update(node, attempts=attempts)
    node_rows.end(node, timezone.now(), "no capacity: every type with room was refused")
    return False


def take_type(cloud_pool: CloudPool, node: CloudNode, instance_type: InstanceType, now: datetime) -> bool:
    """Move a node falling back to another type onto it, if that type has room and is not backing
    off: under the pool's lock, so that two passes falling back at once never exceed its
    ``max_count``."""
    with transaction.atomic():
        Pool.objects.select_for_update(no_key=True).filter(pk=cloud_pool.pool_id).first()
        live = instance_type.nodes.filter(state__in=CloudNode.LIVE_STATES).count()
        if live >= instance_type.max_count or backing_off(cloud_pool, instance_type, now):
            return False
        node_rows.update(
            node, instance_type=instance_type, instance_type_name=instance_type.name, gpus=instance_type.gpus
        )
    return True


def spot_first(cloud_pool: CloudPool, instance_type: InstanceType, now: datetime) -> bool:
    """Spot, unless a spot node of this type was not granted within the spot timeout lately."""
    if not instance_type.spot:
        return False
    recent = now - timedelta(seconds=cloud_pool.boot_timeout_s)
    timed_out = instance_type.nodes.filter(
        reason__startswith=node_rows.SPOT_TIMED_OUT, launched_at__gte=recent
    )
    return not timed_out.exists()


def gpus(milli: int) -> Decimal:
    return Decimal(milli) / MILLI
