"""Writes for GPU types, pools and their enrolment tokens: the estate (GPU types, pools, capacity
history) and the tokens IT hands to the pools' daemons. The daemons' own protocol (enrolment,
heartbeats, claims, reports) is ``apps.workers.services``. Callers import this package."""

from apps.pools.services.estate import (
    create_gpu_type,
    create_pool,
    record_capacity,
    record_observed,
    update_gpu_type,
    update_pool,
)
from apps.pools.services.tokens import (
    ENROLMENT_PREFIX,
    WORKER_PREFIX,
    issue_enrolment_token,
    new_secret,
    revoke_enrolment_token,
)

__all__ = [
    "ENROLMENT_PREFIX",
    "WORKER_PREFIX",
    "create_gpu_type",
    "create_pool",
    "issue_enrolment_token",
    "new_secret",
    "record_capacity",
    "record_observed",
    "revoke_enrolment_token",
    "update_gpu_type",
    "update_pool",
]
