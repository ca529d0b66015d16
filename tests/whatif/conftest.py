import pytest

from apps.accounts.models import Membership
from tests.factories import GroupFactory, MembershipFactory, UserFactory
from tests.whatif.recorded import record


@pytest.fixture
def recorded(db, settings):
    record(settings)


@pytest.fixture
def it(db):
    org = GroupFactory(name="IT", slug="it-org", kind="organisation")
    return MembershipFactory(group=org, role=Membership.Role.IT_ADMIN, user=UserFactory(username="ivy")).user
