"""A person's own: their tasks and their history, where they may submit (with their standing against
the budgets above), their projects, and their notifications."""

from django.db.models import Count

from apps.accounts.models import Notification, Project, User
from apps.accounts.selectors import member_group_ids
from apps.ledger.budgets import ResourceBudget, resource_budget
from apps.policies.models import ComputeResource
from apps.policies.selectors import submittable_resources
from apps.portal.selectors import holds_over
from apps.tasks import selectors as task_selectors
from apps.tasks.models import Task

WORK_STATES = task_selectors.WORK_STATES


def notifications(user: User):
    return Notification.objects.filter(user=user)


def unread_count(user: User) -> int:
    return notifications(user).filter(read_at__isnull=True).count()


def my_tasks(user: User):
    return Task.objects.filter(user=user).select_related(
        "compute_resource__policy__group", "compute_resource__profile", "pool", "project"
    )


def my_resources(user: User) -> list[tuple[ComputeResource, ResourceBudget]]:
    """Where the user may submit, each with its standing against the budgets above it (held until
    a reset by a used-up budget, or exempt with a time weight of 0)."""
    resources = list(
        submittable_resources(user).filter(enabled=True).select_related("profile").order_by("name")
    )
    holds = holds_over({r.policy_id for r in resources})
    return [(r, resource_budget(r.profile.time_weight, holds.get(r.policy_id))) for r in resources]


def my_projects(user: User):
    return Project.objects.filter(group_id__in=member_group_ids(user)).select_related("group")


def task_history(task: Task):
    return task.events.select_related("pool", "actor").order_by("at", "pk")


def work_counts(user: User) -> dict[str, dict[str, int]]:
    """The user's tasks per state (waiting, requeued, running, done) and compute resource."""
    counts = {}
    for state, condition in WORK_STATES.items():
        rows = (
            my_tasks(user)
            .filter(condition)
            .values("compute_resource__name")
            .annotate(n=Count("pk"))
            .order_by()
        )
        counts[state] = {row["compute_resource__name"]: row["n"] for row in rows}
    return counts
