"""Who may see what. Roles come from memberships; a person can hold several, and sees the union.

* IT admins (on any group) see the whole estate; so do finance and leadership held on a root
  group (an organisation with no parent).
* Finance and leadership held on any other group (a business unit, ...) see that group's subtree.
* A department head sees their department's subtree; a team lead their group's subtree; a tenant
  admin their tenant's subtree, which they also manage in the admin (``tenant_scope``).
* A member sees their own work, and the compute resources of the groups they belong to.

``managed_group_ids`` is the one owner of this rule: every page, API, export and the CLI call it
(through ``sees_whole_estate``, ``apps.ledger.visibility`` and the apps' selectors).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from apps.accounts.models import ApiToken, Group, Membership, User
from apps.core.memo import remember

Role = Membership.Role
# Estate-wide when held on a root group; over the group's subtree when held lower down.
ESTATE_ROLES = {Role.LEADERSHIP, Role.FINANCE}
SUBTREE_ROLES = {Role.DEPARTMENT_HEAD, Role.TEAM_LEAD, Role.TENANT_ADMIN, *ESTATE_ROLES}


def _memberships(user: User) -> list[tuple[str, int, bool]]:
    """(role, group id, the group is a root) of each of the user's memberships, read once per
    request (``apps.core.memo``)."""

    def read():
        rows = user.memberships.values_list("role", "group_id", "group__parent_id")
        return [(role, group, parent is None) for role, group, parent in rows]

    return remember(("memberships", user.pk), read)


def _held_roles(user: User, wanted) -> set[str]:
    """The roles of the user's memberships for which ``wanted(role, root)`` holds; a superuser
    holds IT admin."""
    if not user.is_authenticated:
        return set()
    found = {role for role, _, root in _memberships(user) if wanted(role, root)}
    if user.is_superuser:
        found.add(Role.IT_ADMIN)
    return found


def roles(user: User) -> set[str]:
    return _held_roles(user, lambda role, root: True)


def has_role(user: User, *wanted: str) -> bool:
    return bool(roles(user) & set(wanted))


def estate_roles(user: User) -> set[str]:
    """The roles the user holds over the whole estate: IT admin on any group (or a superuser),
    finance and leadership on a root group."""
    return _held_roles(user, lambda role, root: role == Role.IT_ADMIN or (role in ESTATE_ROLES and root))


def has_estate_role(user: User, *wanted: str) -> bool:
    """The user holds one of ``wanted`` over the whole estate (``estate_roles``)."""
    return bool(estate_roles(user) & set(wanted))


def sees_whole_estate(user: User) -> bool:
    return bool(estate_roles(user))


def subtree_ids(group_ids: Iterable[int]) -> set[int]:
    """The given groups and all their descendants (one query for the whole tree)."""
    return set().union(*subtrees(group_ids).values())


def subtrees(roots: Iterable[int]) -> dict[int, frozenset[int]]:
    """Each root group with every group below it, from one read of the group tree."""
    roots = list(roots)
    if not roots:
        return {}
    children: dict[int | None, list[int]] = {}
    for pk, parent in remember(
        ("groups", "tree"), lambda: list(Group.objects.values_list("pk", "parent_id"))
    ):
        children.setdefault(parent, []).append(pk)
    found = {}
    for root in roots:
        seen, stack = set(), [root]
        while stack:
            pk = stack.pop()
            if pk not in seen:
                seen.add(pk)
                stack.extend(children.get(pk, []))
        found[root] = frozenset(seen)
    return found


def groups_with_role(user: User, *wanted: str) -> set[int]:
    if not user.is_authenticated:
        return set()
    return {group for role, group, _ in _memberships(user) if role in wanted}


def member_group_ids(user: User) -> set[int]:
    """Groups the user belongs to in any role: the groups whose compute resources they may use."""
    if not user.is_authenticated:
        return set()
    return {group for _, group, _ in _memberships(user)}


def managed_group_ids(user: User) -> set[int] | None:
    """Groups whose work, usage, statements and budgets the user may see beyond their own:
    ``None`` means all of them (``sees_whole_estate``); otherwise the subtrees of the groups the
    user heads, leads, administers as a tenant, or holds finance or leadership on."""
    if sees_whole_estate(user):
        return None
    return subtree_ids(groups_with_role(user, *SUBTREE_ROLES))


@dataclass(frozen=True)
class TenantScope:
    """What a tenant admin manages: ``roots`` (the groups they hold the role on), ``groups`` (the
    roots and every group below them: all they see) and ``below`` (the groups strictly below a
    root: what they change; a root's own policy and compute resources stay IT's)."""

    roots: frozenset[int]
    groups: frozenset[int]
    below: frozenset[int]


def tenant_scope(user: User) -> TenantScope | None:
    """The subtrees that limit the user in the admin: ``None`` for IT admins (no limit); otherwise
    their tenant admin subtrees, empty when they hold no tenant admin role."""
    if has_role(user, Role.IT_ADMIN):
        return None
    trees = subtrees(groups_with_role(user, Role.TENANT_ADMIN))
    groups = frozenset().union(*trees.values())
    below = frozenset().union(*(tree - {root} for root, tree in trees.items()))
    return TenantScope(frozenset(trees), groups, below)


def api_tokens(user: User):
    """The user's personal tokens, newest first, revoked ones included (they show as revoked)."""
    return ApiToken.objects.filter(user=user)


def api_token_by_hash(token_hash: str) -> ApiToken | None:
    return ApiToken.objects.select_related("user", "agent").filter(token_hash=token_hash).first()


def cancellable_group_ids(user: User) -> set[int] | None:
    """Groups whose tasks the user may cancel beyond their own: all for IT admins (``None``), the
    managed subtrees for department heads, team leads and tenant admins. Leadership and finance
    only read."""
    if has_role(user, Role.IT_ADMIN):
        return None
    return subtree_ids(groups_with_role(user, Role.DEPARTMENT_HEAD, Role.TEAM_LEAD, Role.TENANT_ADMIN))


def cost_centres() -> dict[int, str]:
    """Every group's cost centre: its own code, or else its nearest ancestor's ("" when none has
    one). The one owner of the inheritance; one read of the group tree."""
    rows = {
        pk: (parent, code.strip())
        for pk, parent, code in Group.objects.values_list("pk", "parent_id", "cost_centre")
    }
    found: dict[int, str] = {}

    def resolve(pk: int, seen: frozenset = frozenset()) -> str:
        if pk in found:
            return found[pk]
        parent, code = rows[pk]
        if not code and parent is not None and parent in rows and parent not in seen:
            code = resolve(parent, seen | {pk})
        found[pk] = code
        return code

    for pk in rows:
        resolve(pk)
    return found


def group_tree() -> tuple[dict[int, int | None], dict[int, Group]]:
    """Every group's parent id, and every group by id: one read of the group tree."""
    groups = {g.pk: g for g in Group.objects.all()}
    return {pk: g.parent_id for pk, g in groups.items()}, groups


def group_path(pk: int, parents: dict, groups: dict) -> str:
    """The group's path from the organisation ("Acme Labs / Research / ...")."""
    names, node, seen = [], pk, set()
    while node is not None and node not in seen:
        names.append(groups[node].name)
        seen.add(node)
        node = parents.get(node)
    return " / ".join(reversed(names))


def group_labels(pks) -> dict[int, tuple[str, str]]:
    """Each group's name and path from the organisation ("Acme Labs / Research / ...")."""
    parents, groups = group_tree()
    return {pk: (groups[pk].name, group_path(pk, parents, groups)) for pk in pks if pk in groups}
