"""factory-boy factories for the domain model; each builds a valid object through the model."""

from decimal import Decimal

import factory

from apps.accounts.models import Group, Membership, Project, User
from apps.policies.models import ComputeResource, Profile, ResourcePolicy
from apps.pools.models import SINCE_EVER, GpuType, Pool, PoolCapacityChange, Worker


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.test")
    password = factory.django.Password("pw-for-tests-only")


class GroupFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Group

    name = factory.Sequence(lambda n: f"Group {n}")
    slug = factory.Sequence(lambda n: f"group-{n}")
    kind = Group.Kind.TEAM
    parent = None


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    group = factory.SubFactory(GroupFactory)
    role = Membership.Role.MEMBER


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    group = factory.SubFactory(GroupFactory)
    name = factory.Sequence(lambda n: f"project-{n}")


class GpuTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuType
        django_get_or_create = ["name"]

    name = "A100-80GB"
    memory_gb = 80


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"pool-{n}")
    kind = Pool.Kind.KUBERNETES
    gpu_type = factory.SubFactory(GpuTypeFactory)
    capacity = Decimal("8")

    @factory.post_generation
    def since_ever(pool, create, extracted, **kwargs):
        """A test pool has had its capacity since before any test's dates (as a pool that existed
        when the capacity history began, ``pools.0007``)."""
        if create:
            PoolCapacityChange.objects.filter(pool=pool).update(at=SINCE_EVER)


class ProfileFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Profile

    name = factory.Sequence(lambda n: f"profile-{n}")
    gpus = Decimal("1")
    time_weight = Decimal("1")


class PolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourcePolicy

    group = factory.SubFactory(GroupFactory)
    reservation = Decimal("2")
    limit = Decimal("8")


class ComputeResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ComputeResource

    name = factory.Sequence(lambda n: f"resource-{n}")
    policy = factory.SubFactory(PolicyFactory)
    profile = factory.SubFactory(ProfileFactory)


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker

    pool = factory.SubFactory(PoolFactory)
    hostname = factory.Sequence(lambda n: f"node-{n}")
    gpus = Decimal("8")
    token_hash = factory.Sequence(lambda n: f"{n:064x}")
