"""A cloud node's row through its life: update it, end it (terminated, with the reason), release it
(terminate its instance, revoke its token) and shut it out (its worker retired)."""

import logging
from datetime import datetime

from apps.cloud.models import (
    CloudNode,
)
from apps.pools import services as pools
from apps.pools.models import Worker
from apps.workers import services as protocol

log = logging.getLogger("klique.cloud")
State = CloudNode.State
# the reasons a node ends with that the autoscaler and its launches both give
SPOT_TIMED_OUT = "spot not granted"
BOOT_TIMEOUT = "boot timeout"


def update(node: CloudNode, **fields) -> None:
    for name, value in fields.items():
        setattr(node, name, value)
    node.save(update_fields=list(fields))


def end(node: CloudNode, now: datetime, reason: str) -> None:
    """Terminated. Its unused enrolment token is revoked; its worker's tasks are left to the worker
    sweep, which requeues them once the worker is lost."""
    update(node, state=State.TERMINATED, terminated_at=now, reason=reason[:300])
    shut_out(node, now)
    log.info("%s: terminated: %s", node.name, node.reason)


def release(node: CloudNode, reason: str, now: datetime) -> None:
    """Terminate asked. Its enrolment token is revoked (no daemon enrols again on a machine being
    terminated); a node released before it was ready is shut out: any worker that enrolled with its
    name meanwhile is retired too."""
    if node.state != State.READY:
        shut_out(node, now)
    elif node.enrolment_token_id:
        pools.revoke_enrolment_token(node.enrolment_token, now)
    update(node, state=State.RELEASING, reason=reason)
    log.info("%s: release: %s", node.name, reason)


def shut_out(node: CloudNode, now: datetime) -> None:
    if node.enrolment_token_id:
        pools.revoke_enrolment_token(node.enrolment_token, now)
    late = Worker.objects.filter(
        pool=node.cloud_pool.pool_id, hostname=node.name, state=Worker.State.ACTIVE
    ).exclude(pk=node.worker_id or 0)
    for worker in late:
        protocol.retire(worker, now)
