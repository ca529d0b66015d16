"""The estate a Klique run starts from: a template database with the pools, policies, users and
tokens of a shape, built once, and the fresh clone of it each run gets."""

import json
from pathlib import Path

from bench.kueue.shape import Shape


def build_template(url: str, shape: Shape, secrets_file: Path) -> None:
    """Migrate and build the estate in ``url``; the raw tokens go to ``secrets_file``.

    Per cohort the pool, its profile and enrolment token, its department and its first policy (with
    its compute resource, user, membership and API token) go through the services and their rules;
    the cohort's other policies are the same values under the same department, with no parent
    policy whose sums they share, so they pass the same rules and are written in bulk (2,000
    policies one by one through the services take minutes)."""
    from django.core.management import call_command
    from django.db import connections, transaction
    from django.utils import timezone

    from apps.accounts import services as accounts
    from apps.accounts.models import ApiToken, Group, Membership, User
    from apps.policies import services as policies
    from apps.policies.models import ComputeResource, ResourcePolicy
    from apps.pools import services as pools
    from apps.pools.models import EnrolmentToken, GpuType, Pool

    call_command("migrate", verbosity=0)
    now = timezone.now()
    gpu = GpuType.objects.create(name="H100")
    org = Group.objects.create(name="Org", slug="org", kind="organisation")
    secrets = {"enrolment": {}, "api": {}}
    for c in range(shape.cohorts):
        with transaction.atomic():
            pool = Pool.objects.create(
                name=f"cohort{c}", kind=Pool.Kind.BAREMETAL, gpu_type=gpu, capacity=shape.pool_gpus
            )
            profile = policies.create_profile(name=f"cohort{c}", gpus=1, size_from_task=True, pools=[pool])
            token = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="bench"), now=now)
            secrets["enrolment"][pool.name] = token
            dept = Group.objects.create(name=f"Cohort {c}", slug=f"cohort{c}", parent=org, kind="department")
            names = [f"c{c}q{q}" for q in range(shape.queues)]
            first = names[0]
            group = Group.objects.create(name=first, slug=first, parent=dept)
            policy = policies.create_policy(group=group, reservation=shape.reservation, limit=shape.limit)
            resource = policies.connect(policy=policy, profile=profile, name=first)
            user = User.objects.create(username=first)
            accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
            secrets["api"][first] = accounts.create_api_token(user=user, name="bench")[1]
            rest = names[1:]
            if not rest:
                continue
            groups = Group.objects.bulk_create([Group(name=n, slug=n, parent=dept) for n in rest])
            made = ResourcePolicy.objects.bulk_create(
                [ResourcePolicy(group=g, reservation=policy.reservation, limit=policy.limit) for g in groups]
            )
            ComputeResource.objects.bulk_create(
                [
                    ComputeResource(name=n, policy=p, profile=profile, queuing_rank=resource.queuing_rank + i)
                    for i, (n, p) in enumerate(zip(rest, made, strict=True), start=1)
                ]
            )
            users = User.objects.bulk_create([User(username=n) for n in rest])
            Membership.objects.bulk_create(
                [
                    Membership(user=u, group=g, role=Membership.Role.MEMBER)
                    for u, g in zip(users, groups, strict=True)
                ]
            )
            tokens = []
            for n, u in zip(rest, users, strict=True):
                token, secrets["api"][n] = accounts.new_api_token(user=u, name="bench")
                tokens.append(token)
            ApiToken.objects.bulk_create(tokens)
    secrets_file.write_text(json.dumps(secrets))
    connections.close_all()


def clone(template_url: str, url: str) -> None:
    import psycopg

    name, template = url.rsplit("/", 1)[1], template_url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
