"""Notices to a group that other apps deliver: a budget alert, a preemption, a session's notice, a
change request. The app that has one calls ``notify``; the apps that deliver notices (webhooks)
connect to ``group_notice`` from their ``AppConfig.ready``. A receiver runs in the caller's
transaction, so what it writes commits or rolls back with the change that caused it, and no lower
layer imports the faces that deliver (docs/architecture.md, "Reactions across layers")."""

from collections.abc import Callable

from django.dispatch import Signal

# sent with group, kind, title, text, link
group_notice = Signal()
_interest: list[Callable[[], bool]] = []


def listen(receiver, *, interested: Callable[[], bool]) -> None:
    """Connect ``receiver`` to ``group_notice``; ``interested()`` says, cheaply, whether it would
    deliver anything at all now (so a caller can skip composing notices nobody receives)."""
    group_notice.connect(receiver, dispatch_uid=f"{receiver.__module__}.{receiver.__qualname__}")
    if interested not in _interest:
        _interest.append(interested)


def anyone_listening() -> bool:
    return any(interested() for interested in _interest)


def notify(group, kind: str, title: str, text: str, link: str = "") -> None:
    group_notice.send(sender=None, group=group, kind=kind, title=title, text=text, link=link)
