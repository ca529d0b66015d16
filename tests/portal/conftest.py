"""The demo estate for the portal's tests, and a client logged in as one of its people."""

import pytest

from apps.accounts.models import User
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.portal import demo
from apps.tasks import services as tasks


@pytest.fixture
def estate(db):
    demo.seed()


@pytest.fixture
def login(client, estate):
    def as_user(username: str | None):
        client.logout()
        if username:
            client.force_login(User.objects.get(username=username))
        return client

    return as_user


def submit(username: str, resource: str, **fields):
    return tasks.submit(
        user=User.objects.get(username=username),
        compute_resource=ComputeResource.objects.get(name=resource),
        command=fields.pop("command", "sleep 60"),
        channel="portal",
        **fields,
    )


def split_form(slugs, **changes) -> dict:
    """A split form as the page shows it for the policies of ``slugs``, with ``changes``
    {slug: {field: value}} on top."""
    data = {}
    for slug in slugs:
        p = ResourcePolicy.objects.get(group__slug=slug)
        row = {
            "reservation": p.reservation,
            "limit": p.limit,
            "budget_hours": "" if p.budget_hours is None else p.budget_hours,
            "budget_period": p.budget_period,
            "version": p.version,
        } | changes.get(slug, {})
        data |= {f"p{p.pk}-{field}": value for field, value in row.items()}
    return data
