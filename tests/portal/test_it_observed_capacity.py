"""IT sees, per pool, the GPUs its live worker daemons have beside the declared capacity, with a
warning where they differ, in the portal's IT view and in the admin (docs/engine.md, "Observed
capacity")."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool
from apps.workers import services as protocol
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def daemon(pool_name: str, gpus: int) -> Pool:
    pool = Pool.objects.get(name=pool_name)
    token = EnrolmentToken(pool=pool, name="node")
    pools.issue_enrolment_token(token, now=NOW)
    protocol.enrol(token, hostname=f"{pool_name}-node", gpus=Decimal(gpus), mode="process", now=NOW)
    return pool


def test_it_sees_the_live_daemons_gpus_and_a_warning_where_they_differ_from_the_declared(login):
    daemon("baremetal", 4)  # declared 16
    daemon("sovereign", 8)  # declared 8
    page = login("it").get(reverse("portal:it")).content.decode()
    rows = {name: page.split(f">{name}<", 1)[1].split("</tr>", 1)[0] for name in ("baremetal", "sovereign")}
    assert "not as declared" in rows["baremetal"] and "the engine places against 4" in rows["baremetal"]
    assert "not as declared" not in rows["sovereign"]
    assert "not as declared" not in page.split(">hpc-slurm<", 1)[1].split("</tr>", 1)[0]  # no daemon: —


def test_the_admin_shows_the_live_daemons_gpus_and_the_observed_capacity_history(client, estate):
    pool = daemon("baremetal", 4)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    page = client.get(reverse("admin:pools_pool_change", args=[pool.pk])).content.decode()
    assert "differs from the declared 16: the engine places against 4" in page
    assert "live daemons&#x27; GPUs" in page or "live daemons' GPUs" in page
    listing = client.get(reverse("admin:pools_pool_changelist")).content.decode()
    assert "no live daemon" in listing and "differs from the declared 16" in listing
