"""Who sees which usage: the estate's viewers all of it (IT, and finance and leadership at the
organisation's root); finance and leadership of a business unit, heads and leads their groups'
subtrees; everyone their own (``apps.accounts.selectors.managed_group_ids`` owns the rule).
Every report, page, export and API answer filters by ``visible`` and refuses what
``refusal`` names (a 403)."""

from django.db.models import Q

from apps.accounts.models import Group, Project, User
from apps.accounts.selectors import managed_group_ids, member_group_ids
from apps.ledger.report_spec import ReportSpec


def visible(viewer: User) -> Q:
    managed = managed_group_ids(viewer)
    if managed is None:
        return Q()
    return Q(user_id=viewer.pk) | Q(group_id__in=managed)


def may_see_unused_capacity(viewer: User) -> bool:
    """Unused capacity is estate-wide: IT, and leadership and finance at the organisation's root."""
    return managed_group_ids(viewer) is None


def refusal(viewer: User, spec: ReportSpec) -> str | None:
    """Why the viewer may not see this report (a 403), or None."""
    managed = managed_group_ids(viewer)
    if managed is None:
        return None
    if spec.idle:
        return (
            "Unused capacity is estate-wide: only IT, and leadership and finance at the organisation's "
            "root, see it."
        )
    if spec.group and spec.group.pk not in managed | member_group_ids(viewer):
        return f"You may not see the usage of group {spec.group.slug}."
    if spec.user and spec.user.pk != viewer.pk and not managed:
        return "You may see only your own usage."
    return None


def scope(viewer: User) -> str:
    """What the viewer's reports count, in words."""
    managed = managed_group_ids(viewer)
    if managed is None:
        return "all usage of the estate"
    if managed:
        return "the usage of the groups you lead or keep the books of, with their subtrees, and your own"
    return "your own usage"


def visible_groups(viewer: User):
    managed = managed_group_ids(viewer)
    if managed is None:
        return Group.objects.all()
    return Group.objects.filter(pk__in=managed | member_group_ids(viewer))


def visible_projects(viewer: User):
    return Project.objects.filter(group__in=visible_groups(viewer)).select_related("group")
