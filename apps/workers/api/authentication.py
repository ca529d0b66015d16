"""``Authorization: Bearer ...`` for the worker endpoints: an enrolment token (``kqe_``) on
enrolment, a worker token (``kqw_``) everywhere else. Used only on the worker endpoints, so a
personal token is refused here, and these tokens are refused everywhere else."""

import time

from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from apps.accounts.services import hash_token
from apps.pools import selectors, services
from apps.pools.models import EnrolmentToken, Worker


class _PrefixedBearer(authentication.BaseAuthentication):
    """A bearer token with a known prefix; subclasses say what it is and how to find it."""

    prefix = ""
    what = ""

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Send one token: Authorization: Bearer <token>.")
        raw = parts[1].decode(errors="replace")
        if not raw.startswith(self.prefix):
            raise exceptions.AuthenticationFailed(f"This endpoint takes {self.what} ({self.prefix}...).")
        found = self.lookup(raw)
        if found is None:
            raise exceptions.AuthenticationFailed(f"Unknown, revoked or expired {self.what}.")
        return AnonymousUser(), found

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="klique-workers"'


class EnrolmentTokenAuthentication(_PrefixedBearer):
    prefix = services.ENROLMENT_PREFIX
    what = "an enrolment token"

    def lookup(self, raw: str):
        return selectors.enrolment_token_by_raw(raw, timezone.now())


WORKER_CACHE_S = 60.0
WORKER_CACHE_SIZE = 20_000
_workers: dict[str, tuple[float, Worker]] = {}


class WorkerTokenAuthentication(_PrefixedBearer):
    """The worker a token names, remembered by this process for ``WORKER_CACHE_S`` (a query less
    on each of the calls every daemon makes; longer than the heartbeat interval of a large estate,
    20 s at 2,000 daemons, so that the cache serves the next call). Safe for a retired worker:
    every write a worker token can make checks the worker's state in its own transaction (a
    heartbeat, a sync and a claim answer 401 for a retired worker, a wait too; a report of a
    retired worker finds its work requeued and changes nothing), so only the 401 of a report
    comes up to ``WORKER_CACHE_S`` late. Nothing decides on the remembered state: the heartbeat
    reads the state it replaces from the row it locks. The remembered GPUs bound a claim's
    ``free_gpus`` until this process sees a heartbeat with new ones. A token of a worker that does
    not exist is never remembered."""

    prefix = services.WORKER_PREFIX
    what = "a worker token"

    def lookup(self, raw: str):
        now = time.monotonic()
        key = hash_token(raw)
        cached = _workers.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        worker = selectors.worker_by_token(raw)
        if worker is not None:
            if len(_workers) >= WORKER_CACHE_SIZE:
                _workers.clear()
            _workers[key] = (now + WORKER_CACHE_S, worker)
        return worker


def worker_of(request) -> Worker | None:
    """The worker of the request's worker token, as ``WorkerTokenAuthentication`` finds it; None
    for a request that one refuses or does not authenticate (it says why)."""
    try:
        found = WorkerTokenAuthentication().authenticate(request)
    except exceptions.AuthenticationFailed:
        return None
    return None if found is None else found[1]


class HasEnrolmentToken(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, EnrolmentToken)


class IsWorker(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, Worker)


class WorkerTokenScheme(OpenApiAuthenticationExtension):
    target_class = WorkerTokenAuthentication
    name = "workerToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A worker token (kqw_...) from enrolment."}


class EnrolmentTokenScheme(OpenApiAuthenticationExtension):
    target_class = EnrolmentTokenAuthentication
    name = "enrolmentToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A pool's enrolment token (kqe_...)."}
