"""The admin edits what a worker runs a task with: a pool's multi-node flag (by kind unless set)
and Kubernetes namespace, a profile's image, stop grace and memory cap, and the GPU resource a
fraction is on each pool of the profile (the profile's pool inline)."""

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies.models import ProfilePool
from apps.pools.models import Pool
from tests.factories import GpuTypeFactory, GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def it_client(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return client


def pool_form(name, kind, **extra):
    return {
        "name": name,
        "kind": kind,
        "gpu_type": GpuTypeFactory().pk,
        "capacity": "8",
        "region": "",
        "enabled": "on",
        "multi_node": "unknown",
        "namespace": "",
        "profile_links-TOTAL_FORMS": "0",
        "profile_links-INITIAL_FORMS": "0",
        "workers-TOTAL_FORMS": "0",
        "workers-INITIAL_FORMS": "0",
        **extra,
    }


@pytest.mark.parametrize(
    ("kind", "choice", "multi_node"),
    [
        ("kubernetes", "unknown", True),
        ("hpc", "unknown", True),
        ("baremetal", "unknown", False),
        ("baremetal", "true", True),
        ("kubernetes", "false", False),
    ],
)
def test_a_pool_added_in_the_admin_is_multi_node_by_kind_unless_set(it_client, kind, choice, multi_node):
    url = reverse("admin:pools_pool_add")
    answer = it_client.post(url, pool_form("p", kind, multi_node=choice))
    assert answer.status_code == 302, answer.content.decode()[:3000]
    assert Pool.objects.get(name="p").multi_node is multi_node


def test_a_pool_namespace_must_be_a_dns_label(it_client):
    url = reverse("admin:pools_pool_add")
    refused = it_client.post(url, pool_form("p", "kubernetes", namespace="ML_Team"))
    assert refused.status_code == 200 and "Kubernetes namespace" in refused.content.decode()
    answer = it_client.post(url, pool_form("p", "kubernetes", namespace="ml-team", namespace_per_group="on"))
    assert answer.status_code == 302
    pool = Pool.objects.get(name="p")
    assert pool.namespace == "ml-team" and pool.namespace_per_group


def test_the_profile_page_edits_image_grace_memory_and_the_gpu_resource_per_pool(it_client):
    profile = ProfileFactory(name="mig-1g", gpus=Decimal("0.125"))
    pool = PoolFactory(name="k8s")
    form = {
        "name": "mig-1g",
        "gpus": "0.125",
        "time_weight": "1",
        "description": "",
        "image": "ghcr.io/org/base:1",
        "stop_grace_s": "90",
        "memory_limit_mb": "10240",
        "pool_links-TOTAL_FORMS": "1",
        "pool_links-INITIAL_FORMS": "0",
        "pool_links-0-pool": pool.pk,
        "pool_links-0-pool_rank": "0",
        "pool_links-0-gpu_resource": "nvidia.com/mig-1g.10gb",
        "pool_links-0-gpu_resource_count": "1",
        "compute_resources-TOTAL_FORMS": "0",
        "compute_resources-INITIAL_FORMS": "0",
    }
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    bad = it_client.post(url, {**form, "pool_links-0-gpu_resource": "nvidia.com/mig 1g"})
    assert bad.status_code == 200 and "Kubernetes resource name" in bad.content.decode()
    answer = it_client.post(url, form)
    assert answer.status_code == 302, answer.content.decode()[:3000]
    profile.refresh_from_db()
    assert (profile.image, profile.stop_grace_s, profile.memory_limit_mb) == ("ghcr.io/org/base:1", 90, 10240)
    link = ProfilePool.objects.get(profile=profile, pool=pool)
    assert (link.gpu_resource, link.gpu_resource_count) == ("nvidia.com/mig-1g.10gb", 1)
