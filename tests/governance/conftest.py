"""The demo estate for change requests: Language (reservation 80, limit 200, 40000 h a month)
splits into Pretraining (48, 160, 24000 h) and Alignment (24, 64, 8000 h); Language sits in the
Research business unit of Acme Labs."""

from decimal import Decimal

import pytest

from apps.accounts.models import Group, User
from apps.governance import services
from apps.policies.models import ResourcePolicy
from apps.portal import demo


@pytest.fixture
def estate(db):
    demo.seed()


def person(username: str) -> User:
    return User.objects.get(username=username)


def group(slug: str) -> Group:
    return Group.objects.get(slug=slug)


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def ask(username: str = "lead-pretraining", slug: str = "pretraining", **values):
    values.setdefault("justification", "A new model needs more GPUs.")
    if not any(k in values for k in ("reservation", "limit", "budget_hours", "profile", "kind")):
        values["reservation"] = Decimal("56")
    return services.file_request(requester=person(username), group=group(slug), **values)
