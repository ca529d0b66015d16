"""Smoke data for ``deploy/check.sh --images``, fed to ``manage.py shell`` inside the control-plane
image: a bare-metal pool of one GPU, its enrolment token, and a task submitted to it through the
services (the engine places it). Prints ``<token> <task id>``; the check's daemon then runs it."""

import uuid
from decimal import Decimal

from django.utils import timezone

from apps.accounts.models import Group, User
from apps.policies.models import ComputeResource, Profile, ResourcePolicy
from apps.pools import services as pools
from apps.pools.models import SINCE_EVER, EnrolmentToken, GpuType, Pool, PoolCapacityChange
from apps.tasks import services as lifecycle

name = f"check-{uuid.uuid4().hex[:8]}"
gpu_type, _ = GpuType.objects.get_or_create(name="check-gpu", defaults={"memory_gb": 16})
pool = Pool.objects.create(name=name, kind=Pool.Kind.BAREMETAL, gpu_type=gpu_type, capacity=Decimal("1"))
PoolCapacityChange.objects.filter(pool=pool).update(at=SINCE_EVER)
token = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name=name), now=timezone.now())
profile = Profile.objects.create(name=name, gpus=Decimal("1"), time_weight=Decimal("1"))
profile.pools.add(pool)
group = Group.objects.create(name=name, slug=name, kind=Group.Kind.TEAM)
policy = ResourcePolicy.objects.create(group=group, reservation=Decimal("1"), limit=Decimal("1"))
resource = ComputeResource.objects.create(name=name, policy=policy, profile=profile)
user = User.objects.create_user(username=name, email=f"{name}@example.test")
task = lifecycle.submit(user=user, compute_resource=resource, command='echo "ran $KLIQUE_TASK_ID"; exit 0')
print(token, task.pk)
