"""Budget alerts and preemptions of my work, written by the engine, are shown in the portal with
read and unread; each person sees only their own."""

import pytest

from apps.accounts.models import Notification, User

pytestmark = pytest.mark.django_db


def notify(username: str, message: str) -> Notification:
    return Notification.objects.create(
        user=User.objects.get(username=username), kind=Notification.Kind.PREEMPTED, message=message
    )


def test_unread_notifications_are_counted_in_the_navigation_and_listed_at_home(login):
    notify("dev-agents", "Task 7 was preempted: reclaimed for a reservation.")
    page = login("dev-agents").get("/").content.decode()
    assert '<span class="badge" id="unread-count">1</span>' in page
    assert "Task 7 was preempted" in page


def test_marking_read_and_unread(login):
    note = notify("dev-agents", "Budget of Agents at 80%.")
    client = login("dev-agents")
    client.post(f"/notifications/{note.pk}/read/")
    assert Notification.objects.get(pk=note.pk).read_at is not None
    assert "unread-count" not in client.get("/").content.decode()
    client.post(f"/notifications/{note.pk}/read/", {"unread": "1"})
    assert Notification.objects.get(pk=note.pk).read_at is None
    client.post("/notifications/read-all/")
    assert not Notification.objects.filter(read_at__isnull=True).exists()


def test_the_list_filters_unread_and_exports_csv(login):
    notify("dev-agents", "first")
    read = notify("dev-agents", "second")
    client = login("dev-agents")
    client.post(f"/notifications/{read.pk}/read/")
    page = client.get("/notifications/?status=unread").content.decode()
    assert "first" in page and "second" not in page
    assert client.get("/notifications/?status=sometimes").status_code == 400
    export = client.get("/notifications/?export=csv&table=notifications").content.decode()
    assert "first" in export and "second" in export


def test_nobody_sees_or_marks_another_persons_notifications(login):
    note = notify("dev-agents", "private to dev-agents")
    client = login("dev-ranking")
    assert "private to dev-agents" not in client.get("/notifications/").content.decode()
    assert client.post(f"/notifications/{note.pk}/read/").status_code == 404
    client.post("/notifications/read-all/")
    assert Notification.objects.get(pk=note.pk).read_at is None
