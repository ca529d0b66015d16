"""Who sees what: the role rules of apps.accounts.selectors."""

import pytest

from apps.accounts import selectors
from apps.accounts.models import Membership
from tests.factories import GroupFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


@pytest.fixture
def tree():
    org = GroupFactory(kind="organisation")
    dept = GroupFactory(kind="department", parent=org)
    team = GroupFactory(parent=dept)
    other = GroupFactory(parent=org)
    return org, dept, team, other


@pytest.mark.parametrize("role", [Role.IT_ADMIN, Role.LEADERSHIP, Role.FINANCE])
def test_estate_roles_see_every_group(tree, role):
    membership = MembershipFactory(group=tree[0], role=role)
    assert selectors.managed_group_ids(membership.user) is None


def test_a_department_head_sees_the_department_subtree_only(tree):
    org, dept, team, other = tree
    head = MembershipFactory(group=dept, role=Role.DEPARTMENT_HEAD).user
    assert selectors.managed_group_ids(head) == {dept.pk, team.pk}


def test_a_team_lead_sees_their_group_and_a_member_sees_no_group(tree):
    _, _, team, _ = tree
    lead = MembershipFactory(group=team, role=Role.TEAM_LEAD).user
    member = MembershipFactory(group=team, role=Role.MEMBER).user
    assert selectors.managed_group_ids(lead) == {team.pk}
    assert selectors.managed_group_ids(member) == set()
    assert selectors.member_group_ids(member) == {team.pk}


def test_a_person_can_hold_several_roles(tree):
    _, dept, team, other = tree
    user = UserFactory()
    MembershipFactory(user=user, group=team, role=Role.MEMBER)
    MembershipFactory(user=user, group=other, role=Role.TEAM_LEAD)
    assert selectors.roles(user) == {Role.MEMBER, Role.TEAM_LEAD}
    assert selectors.managed_group_ids(user) == {other.pk}
