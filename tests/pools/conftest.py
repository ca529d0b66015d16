"""A pool with enrolled workers (each with a real worker token) and placed work on it."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.pools import services
from apps.pools.models import EnrolmentToken
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from apps.workers import services as protocol
from tests.factories import ComputeResourceFactory, PoolFactory, ProfileFactory, UserFactory


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def pool():
    return PoolFactory(name="onprem", capacity=Decimal("64"))


@pytest.fixture
def enrolment(pool):
    token = EnrolmentToken(pool=pool, name="rack 1")
    raw = services.issue_enrolment_token(token, now=timezone.now())
    return token, raw


@pytest.fixture
def enrol(enrolment):
    """enrol(hostname, gpus) -> (worker, APIClient with its worker token)."""
    token, _ = enrolment

    def make(hostname="node-1", gpus="4", mode="process"):
        worker, raw = protocol.enrol(
            token, hostname=hostname, gpus=Decimal(gpus), mode=mode, now=timezone.now()
        )
        return worker, bearer(raw)

    return make


@pytest.fixture
def place():
    """place(pool, n, gpus="1", at=None) -> the tasks, placed on the pool in queue order."""
    user = UserFactory()

    def make(pool, n=1, gpus="1", at=None):
        profile = ProfileFactory(gpus=Decimal(gpus))
        profile.pools.add(pool)
        resource = ComputeResourceFactory(profile=profile)
        tasks = [
            lifecycle.submit(user=user, compute_resource=resource, command=f"echo {i}") for i in range(n)
        ]
        loaded = Task.objects.select_related("compute_resource__policy", "compute_resource__profile")
        placements = [(loaded.get(pk=t.pk), pool) for t in tasks]
        lifecycle.place_many(placements, at or timezone.now())
        return [t for t, _ in placements]

    return make


def sweep_steadily(start, end, every=timedelta(seconds=10)) -> dict:
    """Sweep every ``every`` from ``start`` to ``end`` (as a running control plane does); the
    totals of what the sweeps did."""
    totals: dict[str, int] = {}
    at = start
    while at <= end:
        for key, count in protocol.sweep(at).items():
            totals[key] = totals.get(key, 0) + count
        at += every
    return totals
