"""The reference's words for the codes the engine and the services store (an event's reason, a
verdict's rule, a notification's kind, a policy field), each with a sentence for the hover: the
one owner of what a table cell says instead of a raw code. The words come from where each code
is defined: a stop reason's label on ``Task.StopReason``, a verdict rule's from the verdict
wording (``apps.engine.verdict_words.RULE_WORDS``)."""

from django.core.exceptions import FieldDoesNotExist
from django.utils.html import format_html

from apps.accounts.models import Notification
from apps.engine.verdict_words import RULE_WORDS
from apps.policies.models import ResourcePolicy
from apps.tasks.models import Task, TaskEvent

STOP_REASONS = {
    Task.StopReason.RECLAIM: "Its GPUs were borrowed; their owner's reservation took them back.",
    Task.StopReason.BUDGET: "The budget of its policy or one above it was used up; it waited for the reset.",
    Task.StopReason.CANCELED: "Someone canceled it.",
    Task.StopReason.WORKER_LOST: "The worker running it stopped reporting; it went back to its queue.",
    Task.StopReason.UNCLAIMED: "No worker of its pool claimed it in time; it went back to its queue.",
    Task.StopReason.RELEASED: "The pool released it (for example Slurm requeued it).",
    Task.StopReason.START_FAILED: "Its worker could not start it.",
    Task.StopReason.IDLE: "A session idle limit stopped it.",
    Task.StopReason.CLOUD_CAP: "A cloud spend cap was reached before a cloud node took it.",
    Task.StopReason.PRIORITY: (
        "A higher-priority task of its own group needed its GPUs; it went back to its queue."
    ),
    Task.StopReason.FAIR_SHARE: (
        "Its group borrowed more than its fair share while a group beside it, below its own, waited; "
        "it went back to its queue."
    ),
    Task.StopReason.TIME_LIMIT: (
        "It ran for its time limit (running time, across requeues) and ended timed out."
    ),
    Task.StopReason.DEPENDENCY_FAILED: (
        "A task it runs after (after_ok) did not succeed, so it was canceled, and so were the tasks that "
        "run after it."
    ),
}
OTHER_REASONS = {
    "adopted": ("adopted by its worker", "A worker that restarted found it still running and kept it."),
}
NEVER_FITS_CAUSES = {
    "capacity": (
        "larger than every pool",
        "Its size is larger than the largest enabled pool of its profile.",
    ),
    "no_pool": ("no pool enabled", "No pool of its profile is enabled."),
}
NOTIFICATIONS = {
    Notification.Kind.BUDGET_ALERT: "A time or money budget passed its alert threshold.",
    Notification.Kind.BUDGET_USED_UP: "A time or money budget is used up: work that burns it waits.",
    Notification.Kind.PREEMPTED: "Work was stopped and requeued at the front of its queue.",
    Notification.Kind.SCHEDULE_STOPPED: "A schedule stopped submitting work.",
    Notification.Kind.SESSION_IDLE: "A session was stopped by its idle limits.",
    Notification.Kind.CHANGE_REQUEST: "A change request was filed or decided.",
}


def stop_reason(code: str) -> tuple[str, str]:
    """(words, explanation) of a stop reason ("budget")."""
    if code in Task.StopReason.values:
        return Task.StopReason(code).label, STOP_REASONS.get(code, "")
    return OTHER_REASONS.get(code, (code.replace("_", " "), ""))


def event_reason(kind: str, code: str) -> tuple[str, str]:
    """(words, explanation) of a task event's reason: a verdict's rule, else a stop reason."""
    if not code:
        return "", ""
    if kind == TaskEvent.Kind.VERDICT and code in RULE_WORDS:
        return RULE_WORDS[code]
    return stop_reason(code)


def never_fits_cause(code: str) -> tuple[str, str]:
    return NEVER_FITS_CAUSES.get(code, (code.replace("_", " "), ""))


def notification_kind(code: str) -> tuple[str, str]:
    if code in Notification.Kind.values:
        return Notification.Kind(code).label, NOTIFICATIONS.get(code, "")
    return code.replace("_", " "), ""


def policy_field(name: str) -> str:
    """A resource policy field in words ("time budget" for ``budget_hours``)."""
    try:
        return str(ResourcePolicy._meta.get_field(name).verbose_name)
    except FieldDoesNotExist:
        return name.replace("_", " ")


def explained(words: str, explanation: str):
    """A cell with its words, explained on hover."""
    if not explanation:
        return words or "—"
    return format_html('<span class="explained" title="{}">{}</span>', explanation, words)
