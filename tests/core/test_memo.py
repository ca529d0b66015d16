"""The per-request memo (apps/core/memo.py): the requester's memberships and the group tree are
read once per request, forgotten when the same request writes them, and never kept past it."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts import selectors
from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership
from apps.core.memo import RequestMemoMiddleware
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db


def in_request(work):
    """Run ``work`` as a view would, inside the middleware's memo; its result."""
    found = []
    RequestMemoMiddleware(lambda request: found.append(work()))(None)
    return found[0]


def test_roles_and_the_group_tree_are_read_once_per_request_and_again_in_the_next():
    user, group = UserFactory(), GroupFactory(kind="organisation")
    accounts.add_membership(user=user, group=group, role=Membership.Role.FINANCE)

    def reads():
        with CaptureQueriesContext(connection) as captured:
            for _ in range(3):
                assert selectors.roles(user) == {"finance"}
                assert selectors.sees_whole_estate(user)
                assert selectors.subtree_ids([group.pk]) == {group.pk}
        return len(captured.captured_queries)

    assert in_request(reads) == 2
    assert in_request(reads) == 2  # a new request reads again
    assert reads() == 9  # outside a request nothing is remembered


def test_a_write_in_the_request_is_seen_by_what_the_same_request_reads_after():
    user, org = UserFactory(), GroupFactory(kind="organisation")
    unit = GroupFactory(kind="business_unit", parent=org)

    def work():
        before = (selectors.roles(user), selectors.subtree_ids([org.pk]))
        accounts.add_membership(user=user, group=unit, role=Membership.Role.LEADERSHIP)
        team = Group.objects.create(name="t", slug="t", kind="team", parent=unit)
        return before, selectors.roles(user), selectors.subtree_ids([org.pk]), team.pk

    (roles, tree), roles_after, tree_after, team = in_request(work)
    assert roles == set() and roles_after == {"leadership"}
    assert tree == {org.pk, unit.pk} and tree_after == {org.pk, unit.pk, team}


def test_the_move_dry_run_checks_the_moved_tree_and_leaves_the_real_one_remembered(monkeypatch):
    from apps.policies import rules
    from apps.policies import services as policies

    org = GroupFactory(kind="organisation")
    a, b = GroupFactory(kind="business_unit", parent=org), GroupFactory(kind="business_unit", parent=org)
    team = GroupFactory(kind="team", parent=a)
    policies.create_policy(group=team, reservation=0, limit=1)
    seen = []
    monkeypatch.setattr(
        rules, "policy_errors", lambda policy: seen.append(selectors.subtree_ids([b.pk])) or {}
    )

    def work():
        assert selectors.subtree_ids([b.pk]) == {b.pk}
        rules.group_move_errors(team, b)
        return selectors.subtree_ids([b.pk]), selectors.subtree_ids([a.pk])

    assert in_request(work) == ({b.pk}, {a.pk, team.pk})
    assert seen == [{b.pk, team.pk}]  # inside the dry run: the tree as it would be
