"""Sizes by capability: a profile may require a minimum GPU memory and GPU generation instead of
naming a GPU model; it lists only pools whose GPU type meets them (services, admin forms), a pool's
or GPU type's change that would break it is refused, and the admin suggests the pool order newest
hardware first (generation, then memory, descending) and applies it with an action."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import selectors, services
from apps.policies.models import Profile, ProfilePool
from apps.pools import services as pools
from apps.pools.models import GpuType, Pool
from tests.channels.conftest import client_for
from tests.factories import GroupFactory, UserFactory
from tests.policies.test_sovereignty import profile_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def estate():
    """Four pools: L40S (48 GB, Ada: 8), A100 (80 GB, Ampere: 8), H100 (80 GB, Hopper: 9) and
    B200 (192 GB, Blackwell: 10)."""
    types = {
        name: pools.create_gpu_type(name=name, memory_gb=memory, generation=generation)
        for name, memory, generation in (("L40S", 48, 8), ("A100", 80, 8), ("H100", 80, 9), ("B200", 192, 10))
    }
    return {
        name: pools.create_pool(name=name, kind="kubernetes", gpu_type=types[gpu], capacity=8)
        for name, gpu in (("ada", "L40S"), ("ampere", "A100"), ("hopper", "H100"), ("blackwell", "B200"))
    }


@pytest.fixture
def it_client(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return client


def test_a_profile_with_a_minimum_gpu_memory_lists_only_pools_with_enough(estate):
    with pytest.raises(ValidationError) as refused:
        services.create_profile(
            name="big", gpus=1, min_gpu_memory_gb=80, pools=[estate["ampere"], estate["ada"]]
        )
    assert refused.value.message_dict["pool"] == [
        "Pool ada has GPU type L40S with 48 GB, below the minimum GPU memory of profile big (80 GB)."
    ]
    assert not Profile.objects.exists()
    profile = services.create_profile(name="big", gpus=1, min_gpu_memory_gb=80, pools=[estate["ampere"]])
    assert list(profile.pools.all()) == [estate["ampere"]]


def test_a_profile_with_a_minimum_generation_lists_only_pools_that_new(estate):
    profile = services.create_profile(name="hopper+", gpus=1, min_gpu_generation=9, pools=[estate["hopper"]])
    with pytest.raises(ValidationError) as refused:
        services.link_pool(profile, estate["ampere"])
    assert refused.value.message_dict["pool"] == [
        "Pool ampere has GPU type A100 of generation 8, "
        "below the minimum GPU generation of profile hopper+ (9)."
    ]
    services.link_pool(profile, estate["blackwell"])
    assert set(profile.pools.all()) == {estate["hopper"], estate["blackwell"]}


def test_raising_a_profile_minimum_above_a_listed_pool_is_refused_on_the_field(estate):
    profile = services.create_profile(name="any", gpus=1, pools=[estate["ada"], estate["hopper"]])
    with pytest.raises(ValidationError) as refused:
        services.update_profile(profile, min_gpu_memory_gb=64, min_gpu_generation=9)
    errors = refused.value.message_dict
    assert "Pool ada has GPU type L40S with 48 GB" in " ".join(errors["min_gpu_memory_gb"])
    assert "Pool ada has GPU type L40S of generation 8" in " ".join(errors["min_gpu_generation"])
    stored = Profile.objects.get(pk=profile.pk)
    assert (stored.min_gpu_memory_gb, stored.min_gpu_generation) == (None, None)


def test_a_pool_gpu_type_or_a_gpu_type_change_that_breaks_a_minimum_is_refused(estate):
    services.create_profile(name="hopper+", gpus=1, min_gpu_generation=9, pools=[estate["hopper"]])
    older = GpuType.objects.get(name="A100")
    with pytest.raises(ValidationError) as refused:
        pools.update_pool(Pool.objects.get(name="hopper"), gpu_type=older)
    assert "Remove the pool from profile hopper+ first." in " ".join(refused.value.message_dict["gpu_type"])
    with pytest.raises(ValidationError) as refused:
        pools.update_gpu_type(GpuType.objects.get(name="H100"), generation=8)
    assert "below the minimum GPU generation of profile hopper+ (9)" in " ".join(
        refused.value.message_dict["generation"]
    )
    assert GpuType.objects.get(name="H100").generation == 9
    pools.update_gpu_type(GpuType.objects.get(name="H100"), memory_gb=94)


def test_the_profile_admin_refuses_a_pool_below_the_minimum_on_its_row(it_client, estate):
    profile = services.create_profile(name="big", gpus=1, min_gpu_memory_gb=80, pools=[estate["ampere"]])
    link = ProfilePool.objects.get(profile=profile)
    form = profile_form(profile, [(link.pk, estate["ampere"]), (None, estate["ada"])], min_gpu_memory_gb="80")
    refused = it_client.post(reverse("admin:policies_profile_change", args=[profile.pk]), form)
    assert refused.status_code == 200
    assert "Pool ada has GPU type L40S with 48 GB, below the minimum GPU memory" in refused.content.decode()
    assert list(profile.pools.all()) == [estate["ampere"]]


def test_the_pool_admin_refuses_a_gpu_type_below_a_profile_minimum(it_client, estate):
    hopper = estate["hopper"]
    services.create_profile(name="hopper+", gpus=1, min_gpu_generation=9, pools=[hopper])
    form = {
        "name": "hopper",
        "kind": "kubernetes",
        "gpu_type": GpuType.objects.get(name="A100").pk,
        "capacity": "8",
        "enabled": "on",
        "multi_node": "unknown",
        "profile_links-TOTAL_FORMS": "0",
        "profile_links-INITIAL_FORMS": "0",
        "workers-TOTAL_FORMS": "0",
        "workers-INITIAL_FORMS": "0",
    }
    link = ProfilePool.objects.get(pool=hopper)
    form |= {
        "profile_links-TOTAL_FORMS": "1",
        "profile_links-INITIAL_FORMS": "1",
        "profile_links-0-id": link.pk,
        "profile_links-0-pool": hopper.pk,
        "profile_links-0-profile": link.profile_id,
        "profile_links-0-profile_rank": "0",
    }
    refused = it_client.post(reverse("admin:pools_pool_change", args=[hopper.pk]), form)
    assert refused.status_code == 200
    assert "below the minimum GPU generation of profile hopper+ (9)" in refused.content.decode()


def test_the_suggested_order_is_every_fitting_pool_newest_hardware_first(estate):
    profile = services.create_profile(name="big", gpus=1, min_gpu_memory_gb=80, pools=[estate["ampere"]])
    assert [p.name for p in selectors.suggested_pool_order(profile)] == ["blackwell", "hopper", "ampere"]
    anything = services.create_profile(name="any", gpus=1)
    assert [p.name for p in selectors.suggested_pool_order(anything)] == [
        "blackwell",
        "hopper",
        "ampere",
        "ada",
    ]


def test_the_profile_admin_shows_the_suggested_order(it_client, estate):
    profile = services.create_profile(name="big", gpus=1, min_gpu_memory_gb=80, pools=[estate["ampere"]])
    page = it_client.get(reverse("admin:policies_profile_change", args=[profile.pk])).content.decode()
    assert "suggested pool order" in page.lower()
    assert (
        "blackwell (B200, generation 10, 192 GB, not listed) → "
        "hopper (H100, generation 9, 80 GB, not listed) → ampere (A100, generation 8, 80 GB)"
    ) in page.replace("&gt;", ">")


def test_the_admin_action_orders_the_pools_newest_first(it_client, estate):
    profile = services.create_profile(
        name="any", gpus=1, pools=[estate["ada"], estate["ampere"], estate["blackwell"], estate["hopper"]]
    )
    answer = it_client.post(
        reverse("admin:policies_profile_changelist"),
        {"action": "order_pools_newest_first", "_selected_action": [profile.pk]},
    )
    assert answer.status_code == 302
    order = (
        ProfilePool.objects.filter(profile=profile).order_by("pool_rank").values_list("pool__name", flat=True)
    )
    assert list(order) == ["blackwell", "hopper", "ampere", "ada"], "generation first, then memory"


def test_the_api_shows_a_compute_resource_gpu_minimums(estate):
    group = GroupFactory(kind="team")
    member = UserFactory()
    accounts.add_membership(user=member, group=group, role=Membership.Role.MEMBER)
    profile = services.create_profile(
        name="big", gpus=1, min_gpu_memory_gb=80, min_gpu_generation=9, pools=[estate["hopper"]]
    )
    services.connect(policy=services.create_policy(group=group, reservation=1, limit=2), profile=profile)
    (row,) = client_for(member).get("/api/v1/compute-resources/").json()["results"]
    assert (row["sovereign_country"], row["min_gpu_memory_gb"], row["min_gpu_generation"]) == ("", 80, 9)
