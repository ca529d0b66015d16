"""Who may open which portal view (a forbidden view answers 403), and the navigation: the views a
person's roles open, in the order of the reference's "who decides what" table. Who may split a
quota is the policies' rule (``apps.policies.split.may_split_quota``)."""

from dataclasses import dataclass

from django.urls import reverse

from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import (
    groups_with_role,
    has_estate_role,
    has_role,
    managed_group_ids,
    roles,
    subtree_ids,
)

Role = Membership.Role


def may_see_leadership(user: User) -> bool:
    return has_role(user, Role.LEADERSHIP, Role.IT_ADMIN)


def may_see_it(user: User) -> bool:
    return has_role(user, Role.IT_ADMIN)


def may_set_cloud_caps(user: User) -> bool:
    """Leadership decides how much cloud spend is acceptable; IT sets caps in the admin."""
    return has_role(user, Role.LEADERSHIP)


def may_set_cloud_cap_on(user: User, group: Group) -> bool:
    """Leadership at the organisation's root caps any group; leadership of a business unit its
    own subtree."""
    if has_estate_role(user, Role.LEADERSHIP):
        return True
    return group.pk in subtree_ids(groups_with_role(user, Role.LEADERSHIP))


def may_see_finance(user: User) -> bool:
    return has_role(user, Role.FINANCE, Role.LEADERSHIP, Role.IT_ADMIN)


def may_see_group(user: User, group: Group) -> bool:
    """The estate's viewers see every group; heads, leads, and finance and leadership of a
    business unit their subtrees; members none (``managed_group_ids``)."""
    managed = managed_group_ids(user)
    return managed is None or group.pk in managed


def _decides_for(user: User, group: Group, *wanted: str) -> bool:
    if has_role(user, Role.IT_ADMIN):
        return True
    return group.pk in subtree_ids(groups_with_role(user, *wanted))


def may_manage_team(user: User, group: Group) -> bool:
    """IT, the team's lead and the heads and tenant admins above it decide its members and its
    projects' priority."""
    return _decides_for(user, group, Role.DEPARTMENT_HEAD, Role.TEAM_LEAD, Role.TENANT_ADMIN)


def organisation_to_split(user: User) -> Group | None:
    """The organisation whose quota leadership shares out: the one the person holds leadership on,
    else (for IT) the first top-level organisation."""
    organisations = Group.objects.filter(kind=Group.Kind.ORGANISATION).order_by("name")
    led = groups_with_role(user, Role.LEADERSHIP)
    return organisations.filter(pk__in=led).first() or organisations.filter(parent__isnull=True).first()


def may_see_tenant(user: User, group: Group) -> bool:
    """IT and the group's tenant admins see the tenant's page."""
    return has_role(user, Role.IT_ADMIN) or group.pk in groups_with_role(user, Role.TENANT_ADMIN)


# Navigation by role.


@dataclass(frozen=True)
class NavLink:
    label: str
    url: str
    sees: str


def navigation(user: User) -> list[NavLink]:
    """The person's views, in the order of the reference's "who decides what" table."""
    held = roles(user)
    memberships = list(user.memberships.select_related("group"))
    links = []
    if held & {Role.LEADERSHIP, Role.IT_ADMIN}:
        links.append(
            NavLink("Leadership", reverse("portal:leadership"), "Use of the estate, spend by business unit")
        )
    if Role.IT_ADMIN in held:
        links.append(
            NavLink("IT", reverse("portal:it"), "Pools, queues, budgets near their limit, the engine")
        )
    for m in memberships:
        if m.role == Role.TENANT_ADMIN:
            url = reverse("portal:tenant", args=[m.group.slug])
            links.append(NavLink(m.group.name, url, "Your tenant: its groups, policies and use"))
    for m in memberships:
        if m.role == Role.DEPARTMENT_HEAD:
            url = reverse("portal:department", args=[m.group.slug])
            links.append(NavLink(m.group.name, url, "Use per team, work waiting, the quota split"))
    if held & {Role.FINANCE, Role.LEADERSHIP, Role.IT_ADMIN}:
        links.append(
            NavLink("Finance", reverse("portal:finance"), "Prices, GPU-hours and cost for chargeback")
        )
    for m in memberships:
        if m.role == Role.TEAM_LEAD:
            url = reverse("portal:team", args=[m.group.slug])
            links.append(NavLink(m.group.name, url, "Use against the quota, run-out, members, priorities"))
    links.append(NavLink("My work", reverse("portal:work"), "Your tasks: waiting, running, requeued, done"))
    return links
