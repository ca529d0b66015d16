"""When an identity provider deactivates a person (apps.scim), their running work is left running
and the team leads of the groups that own it are told, to stop it or keep it (docs/governance.md,
"SCIM provisioning"): stopping a colleague's training run is the team's decision, not the
directory's. Their queued work, which has not started, is cancelled: it is new work the person can
no longer answer for, and nothing of it is lost but its place in the queue."""

from apps.accounts.models import Membership, Notification
from apps.tasks.models import Task
from apps.tasks.services import lifecycle

KIND = Notification.Kind.OWNER_DEACTIVATED


def on_user_deactivated(sender, *, user, **_) -> None:
    for task in Task.objects.filter(user=user, state=Task.State.QUEUED):
        lifecycle.cancel(task)
    running = list(
        Task.objects.filter(user=user, state__in=Task.ACTIVE_STATES).select_related(
            "compute_resource__policy__group"
        )
    )
    by_group: dict = {}
    for task in running:
        by_group.setdefault(task.compute_resource.policy.group, []).append(task)
    notices = []
    for group, tasks in by_group.items():
        leads = _leads(group)
        names = ", ".join(str(t) for t in tasks[:10]) + (
            f" and {len(tasks) - 10} more" if len(tasks) > 10 else ""
        )
        message = (
            f"{user.username} was deactivated by the identity provider; their work in {group} is still "
            f"running: {names}. Stop it or keep it."
        )
        link = f"/work/tasks/{tasks[0].pk}/" if len(tasks) == 1 else ""
        notices += [Notification(user_id=lead, kind=KIND, message=message, link=link) for lead in leads]
    Notification.objects.bulk_create(notices)


def _leads(group) -> set[int]:
    """The group's team leads; where it has none, those of the nearest group above that has."""
    for node in [group, *group.ancestors()]:
        leads = set(
            Membership.objects.filter(
                group=node, role=Membership.Role.TEAM_LEAD, user__is_active=True
            ).values_list("user_id", flat=True)
        )
        if leads:
            return leads
    return set()
