"""What-if runs in the admin: IT admins list and open them read-only and may delete one; other
staff (finance, tenant admins) do not see them."""

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.whatif.models import WhatIfRun
from tests.factories import GroupFactory, UserFactory
from tests.whatif.recorded import END, START

pytestmark = pytest.mark.django_db


def staff(role: str):
    user = UserFactory(username=f"staff-{role}")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=role)
    user.refresh_from_db()
    return user


def test_it_admins_list_runs_read_only_and_may_delete_one(client):
    it = staff(Membership.Role.IT_ADMIN)
    run = WhatIfRun.objects.create(
        title="Vision +16", created_by=it, start=START, end=END, state="running", progress=0.525
    )
    client.force_login(it)
    listing = client.get(reverse("admin:whatif_whatifrun_changelist"))
    page = listing.content.decode()
    assert listing.status_code == 200
    assert "Vision +16" in page and "53 %" in page and "Running" in page
    detail = client.get(reverse("admin:whatif_whatifrun_change", args=[run.pk])).content.decode()
    assert 'name="title"' not in detail and "Vision +16" in detail
    assert client.get(reverse("admin:whatif_whatifrun_add")).status_code == 403
    changed = client.post(reverse("admin:whatif_whatifrun_change", args=[run.pk]), {"title": "edited"})
    assert changed.status_code == 403 and WhatIfRun.objects.get().title == "Vision +16"
    client.post(reverse("admin:whatif_whatifrun_delete", args=[run.pk]), {"post": "yes"})
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize("role", [Membership.Role.FINANCE, Membership.Role.TENANT_ADMIN])
def test_other_staff_do_not_see_runs(client, role):
    WhatIfRun.objects.create(start=START, end=END)
    client.force_login(staff(role))
    assert client.get(reverse("admin:whatif_whatifrun_changelist")).status_code == 403
    assert "whatif" not in client.get(reverse("admin:index")).content.decode().lower()
