"""Portal pages, one module per row of the reference's "who decides what" table, and a developer's
work. Views stay thin: they check the role through the selectors (403 otherwise), ask the
selectors for the figures, and leave every change to the services."""

from apps.portal.views.common import home
from apps.portal.views.department import department, split
from apps.portal.views.developer import (
    cancel,
    notification_read,
    notifications,
    notifications_read_all,
    task_detail,
    work,
)
from apps.portal.views.finance import finance
from apps.portal.views.leadership import it, leadership, remove_cloud_cap, set_cloud_cap
from apps.portal.views.team import add_member, project_priority, remove_member, team

__all__ = [
    "add_member",
    "cancel",
    "department",
    "finance",
    "home",
    "it",
    "leadership",
    "notification_read",
    "notifications",
    "notifications_read_all",
    "project_priority",
    "remove_cloud_cap",
    "remove_member",
    "set_cloud_cap",
    "split",
    "task_detail",
    "team",
    "work",
]
