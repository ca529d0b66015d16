"""The demo estate for the portal's tests, and a client logged in as one of its people."""

import pytest

from apps.accounts.models import User
from apps.policies.models import ComputeResource
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
