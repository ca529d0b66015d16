"""Sovereign profiles: a pool carries an ISO 3166-1 country; a profile sovereign to a country lists
only pools in that country. Refused at every way in (services, admin forms, the demo seed), and a
pool's country change that would break a sovereign profile is refused, naming the profile."""

import threading
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import services
from apps.policies.models import Profile, ProfilePool
from apps.pools import services as pools
from apps.pools.models import Pool
from apps.portal import demo
from tests.channels.conftest import client_for
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu():
    return pools.create_gpu_type(name="A100-80GB", memory_gb=80, generation=8)


@pytest.fixture
def berlin(gpu):
    return pools.create_pool(name="berlin", kind="kubernetes", gpu_type=gpu, capacity=8, country="DE")


@pytest.fixture
def paris(gpu):
    return pools.create_pool(name="paris", kind="kubernetes", gpu_type=gpu, capacity=8, country="FR")


@pytest.fixture
def it_client(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return client


def messages_of(error: ValidationError, field: str) -> str:
    return " ".join(error.message_dict[field])


# The country codes.


def test_a_pool_country_is_an_iso_3166_alpha_2_code_or_blank(gpu):
    with pytest.raises(ValidationError) as refused:
        pools.create_pool(name="nowhere", kind="kubernetes", gpu_type=gpu, capacity=1, country="XX")
    assert "not an ISO 3166-1 alpha-2 country code" in messages_of(refused.value, "country")
    assert (
        pools.create_pool(name="lower", kind="kubernetes", gpu_type=gpu, capacity=1, country="de").country
        == "DE"
    )
    assert pools.create_pool(name="none", kind="kubernetes", gpu_type=gpu, capacity=1).country == ""


def test_a_sovereign_country_is_an_iso_3166_alpha_2_code():
    with pytest.raises(ValidationError) as refused:
        services.create_profile(name="p", gpus=1, sovereign_country="EU")
    assert "not an ISO 3166-1 alpha-2" in messages_of(refused.value, "sovereign_country")
    assert not Profile.objects.exists()


# The services.


def test_a_sovereign_profile_is_created_only_with_pools_in_its_country(berlin, paris):
    with pytest.raises(ValidationError) as refused:
        services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin, paris])
    assert messages_of(refused.value, "pool") == (
        "Pool paris is in FR, and profile de-only is sovereign to DE: it lists only pools in DE."
    )
    assert not Profile.objects.exists(), "refused whole: no profile without its pools"
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    assert list(profile.pools.all()) == [berlin]


def test_linking_a_pool_of_another_country_or_of_none_to_a_sovereign_profile_is_refused(berlin, paris, gpu):
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    nowhere = pools.create_pool(name="nowhere", kind="kubernetes", gpu_type=gpu, capacity=8)
    with pytest.raises(ValidationError) as refused:
        services.link_pool(profile, paris)
    assert "Pool paris is in FR" in messages_of(refused.value, "pool")
    with pytest.raises(ValidationError) as refused:
        services.link_pool(profile, nowhere)
    assert "Pool nowhere has no country" in messages_of(refused.value, "pool")
    assert list(profile.pools.all()) == [berlin]


def test_making_a_profile_sovereign_is_refused_while_it_lists_a_pool_elsewhere(berlin, paris):
    profile = services.create_profile(name="eu", gpus=1, pools=[berlin, paris])
    with pytest.raises(ValidationError) as refused:
        services.update_profile(profile, sovereign_country="DE")
    assert "Pool paris is in FR, and profile eu is sovereign to DE" in messages_of(
        refused.value, "sovereign_country"
    )
    assert Profile.objects.get(pk=profile.pk).sovereign_country == ""
    ProfilePool.objects.filter(profile=profile, pool=paris).delete()
    services.update_profile(Profile.objects.get(pk=profile.pk), sovereign_country="de")
    assert Profile.objects.get(pk=profile.pk).sovereign_country == "DE"


def test_changing_or_clearing_a_pool_country_that_breaks_a_sovereign_profile_is_refused(berlin):
    services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    for country, where in (("FR", "is in FR"), ("", "has no country")):
        with pytest.raises(ValidationError) as refused:
            pools.update_pool(Pool.objects.get(pk=berlin.pk), country=country)
        text = messages_of(refused.value, "country")
        assert f"Pool berlin {where}, and profile de-only is sovereign to DE" in text
        assert "Remove the pool from profile de-only first." in text
    assert Pool.objects.get(pk=berlin.pk).country == "DE"
    pools.update_pool(Pool.objects.get(pk=berlin.pk), region="eu-central")  # other fields still change


def test_a_pool_of_no_sovereign_profile_changes_country_freely(paris):
    services.create_profile(name="anywhere", gpus=1, pools=[paris])
    assert pools.update_pool(paris, country="").country == ""


# The admin.


def profile_form(profile: Profile, links: list[tuple[int | None, Pool]], **fields) -> dict:
    """The profile's change form with its pool inline rows as (link id or None for a new row, pool)."""
    form = {
        "name": profile.name,
        "gpus": str(profile.gpus),
        "time_weight": "1",
        "min_runtime_s": "0",
        "description": "",
        "image": "",
        "sovereign_country": profile.sovereign_country,
        "pool_links-TOTAL_FORMS": str(len(links)),
        "pool_links-INITIAL_FORMS": str(sum(1 for pk, _ in links if pk)),
        "compute_resources-TOTAL_FORMS": "0",
        "compute_resources-INITIAL_FORMS": "0",
    }
    for i, (pk, pool) in enumerate(links):
        form |= {
            f"pool_links-{i}-id": pk or "",
            f"pool_links-{i}-profile": profile.pk or "",
            f"pool_links-{i}-pool": pool.pk,
            f"pool_links-{i}-pool_rank": str(i),
            f"pool_links-{i}-gpu_resource_count": "1",
        }
    return form | fields


def test_the_profile_admin_refuses_a_pool_of_another_country_on_its_row(it_client, berlin, paris):
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    link = ProfilePool.objects.get(profile=profile)
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    refused = it_client.post(url, profile_form(profile, [(link.pk, berlin), (None, paris)]))
    assert refused.status_code == 200
    assert "Pool paris is in FR, and profile de-only is sovereign to DE" in refused.content.decode()
    assert list(profile.pools.all()) == [berlin]


def test_the_profile_admin_refuses_sovereignty_over_a_listed_pool_elsewhere(it_client, berlin, paris):
    profile = services.create_profile(name="eu", gpus=1, pools=[berlin, paris])
    links = [
        (link.pk, link.pool) for link in ProfilePool.objects.filter(profile=profile).order_by("pool_rank")
    ]
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    refused = it_client.post(url, profile_form(profile, links, sovereign_country="DE"))
    assert refused.status_code == 200
    assert "Pool paris is in FR, and profile eu is sovereign to DE" in refused.content.decode()
    assert Profile.objects.get(pk=profile.pk).sovereign_country == ""


def test_the_profile_admin_makes_a_profile_sovereign_while_removing_the_pool_elsewhere(
    it_client, berlin, paris
):
    profile = services.create_profile(name="eu", gpus=1, pools=[berlin, paris])
    links = [
        (link.pk, link.pool) for link in ProfilePool.objects.filter(profile=profile).order_by("pool_rank")
    ]
    form = profile_form(profile, links, sovereign_country="de") | {"pool_links-1-DELETE": "on"}
    answer = it_client.post(reverse("admin:policies_profile_change", args=[profile.pk]), form)
    assert answer.status_code == 302, answer.content.decode()[:3000]
    profile.refresh_from_db()
    assert profile.sovereign_country == "DE" and list(profile.pools.all()) == [berlin]


def test_a_new_sovereign_profile_in_the_admin_gets_only_pools_of_its_country(it_client, berlin, paris):
    new = Profile(name="de-new", gpus=Decimal("1"), sovereign_country="DE")
    form = profile_form(new, [(None, paris)])
    refused = it_client.post(reverse("admin:policies_profile_add"), form)
    assert refused.status_code == 200 and "Pool paris is in FR" in refused.content.decode()
    assert not Profile.objects.filter(name="de-new").exists()
    answer = it_client.post(reverse("admin:policies_profile_add"), profile_form(new, [(None, berlin)]))
    assert answer.status_code == 302
    assert list(Profile.objects.get(name="de-new").pools.all()) == [berlin]


def pool_form(pool: Pool, **fields) -> dict:
    return {
        "name": pool.name,
        "kind": pool.kind,
        "gpu_type": pool.gpu_type_id,
        "capacity": str(pool.capacity),
        "region": pool.region,
        "country": pool.country,
        "enabled": "on",
        "multi_node": "unknown",
        "namespace": "",
        "profile_links-TOTAL_FORMS": "0",
        "profile_links-INITIAL_FORMS": "0",
        "workers-TOTAL_FORMS": "0",
        "workers-INITIAL_FORMS": "0",
        **fields,
    }


def test_the_pool_admin_refuses_a_country_change_that_breaks_a_sovereign_profile(it_client, berlin):
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    link = ProfilePool.objects.get(profile=profile)
    rows = {
        "profile_links-TOTAL_FORMS": "1",
        "profile_links-INITIAL_FORMS": "1",
        "profile_links-0-id": link.pk,
        "profile_links-0-pool": berlin.pk,
        "profile_links-0-profile": profile.pk,
        "profile_links-0-profile_rank": "0",
    }
    url = reverse("admin:pools_pool_change", args=[berlin.pk])
    refused = it_client.post(url, pool_form(berlin, country="FR") | rows)
    assert refused.status_code == 200
    assert "Pool berlin is in FR, and profile de-only is sovereign to DE" in refused.content.decode()
    assert Pool.objects.get(pk=berlin.pk).country == "DE"
    bad_code = it_client.post(url, pool_form(berlin, country="ZZ") | rows)
    assert "not an ISO 3166-1 alpha-2 country code" in bad_code.content.decode()
    moved = it_client.post(url, pool_form(berlin, country="FR") | rows | {"profile_links-0-DELETE": "on"})
    assert moved.status_code == 302, "removing the pool from the profile in the same form lets it move"
    assert Pool.objects.get(pk=berlin.pk).country == "FR"


def test_the_pool_admin_refuses_a_sovereign_profile_of_another_country(it_client, berlin, paris):
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    rows = {
        "profile_links-TOTAL_FORMS": "1",
        "profile_links-INITIAL_FORMS": "0",
        "profile_links-0-pool": paris.pk,
        "profile_links-0-profile": profile.pk,
        "profile_links-0-profile_rank": "0",
    }
    refused = it_client.post(reverse("admin:pools_pool_change", args=[paris.pk]), pool_form(paris) | rows)
    assert refused.status_code == 200 and "Pool paris is in FR" in refused.content.decode()
    assert not ProfilePool.objects.filter(pool=paris).exists()


# The API and the seed.


def test_the_api_shows_a_compute_resource_sovereign_country(berlin):
    group = GroupFactory(kind="team")
    member = UserFactory()
    accounts.add_membership(user=member, group=group, role=Membership.Role.MEMBER)
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE", pools=[berlin])
    policy = services.create_policy(group=group, reservation=1, limit=2)
    services.connect(policy=policy, profile=profile)
    body = client_for(member).get("/api/v1/compute-resources/").json()
    (row,) = body["results"]
    assert (row["sovereign_country"], row["min_gpu_memory_gb"], row["min_gpu_generation"]) == (
        "DE",
        None,
        None,
    )


def test_the_demo_seed_gives_its_sovereign_profile_only_pools_of_its_country():
    demo.seed()
    profile = Profile.objects.get(name="sovereign-a100-1")
    assert profile.sovereign_country == "DE"
    assert {pool.country for pool in profile.pools.all()} == {"DE"}


def test_the_demo_seed_is_refused_a_sovereign_profile_with_a_pool_elsewhere(monkeypatch):
    monkeypatch.setitem(demo.PROFILE_CONSTRAINTS, "a100-1", ("DE", None, None))
    with pytest.raises(ValidationError) as refused:
        demo.seed()
    assert "Pool onprem-k8s is in NL, and profile a100-1 is sovereign to DE" in messages_of(
        refused.value, "pool"
    )
    assert not Profile.objects.exists(), "the seed is one transaction"


# Concurrent writes.


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_pool_linked_while_its_country_changes_waits_for_the_change_and_is_refused(berlin):
    """The rule: ``update_pool`` and ``link_pool`` lock the pool's row, so a link checked while the
    pool moves to FR reads FR, not the DE it had when the link began."""
    profile = services.create_profile(name="de-only", gpus=1, sovereign_country="DE")
    outcome: list = []

    def link():
        try:
            outcome.append(services.link_pool(profile, Pool.objects.get(pk=berlin.pk)))
        except ValidationError as error:
            outcome.append(error)
        finally:
            connection.close()

    linker = threading.Thread(target=link)
    with transaction.atomic():
        pools.update_pool(Pool.objects.get(pk=berlin.pk), country="FR")
        linker.start()
        with connection.cursor() as cursor:
            waiting = 0
            while not waiting and linker.is_alive():
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                waiting = cursor.fetchone()[0]
        assert waiting, "the link waits for the pool's lock while the country change is open"
    linker.join()
    (refused,) = outcome
    assert isinstance(refused, ValidationError)
    assert "Pool berlin is in FR, and profile de-only is sovereign to DE" in messages_of(refused, "pool")
    assert not ProfilePool.objects.exists()
