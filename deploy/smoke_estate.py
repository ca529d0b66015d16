"""The estate of ``deploy/smoke.sh``, run through ``manage.py shell``: a bare-metal pool of one GPU,
a team with a policy and a compute resource on it, a person in the team who logs in with
``SMOKE_PASSWORD`` and holds a personal API token, and the pool's enrolment token. Prints them as
one JSON object (the tokens are shown only here)."""

import json
import os

from django.utils import timezone

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from apps.policies import services as policies
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool

gpu_type = pools.create_gpu_type(name="smoke-gpu", memory_gb=16)
pool = pools.create_pool(name="smoke-pool", kind=Pool.Kind.BAREMETAL, gpu_type=gpu_type, capacity=1)
profile = policies.create_profile(name="smoke-1gpu", gpus=1, pools=[pool])
team = accounts.create_group(name="Smoke team", slug="smoke-team", kind=Group.Kind.TEAM)
policy = policies.create_policy(group=team, reservation=1, limit=1)
resource = policies.connect(policy=policy, profile=profile, name="smoke-1gpu")
person = User.objects.create_user(
    username="smoke", email="smoke@example.test", password=os.environ["SMOKE_PASSWORD"]
)
accounts.add_membership(user=person, group=team, role=Membership.Role.MEMBER)
_, api_token = accounts.create_api_token(user=person, name="smoke")
enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="smoke"), now=timezone.now())
print(json.dumps({"resource": resource.name, "api_token": api_token, "enrolment_token": enrolment}))
