"""Budget alerts and preemptions of my work, written by the engine, are shown in the portal with
read and unread; each person sees only their own."""

import pytest
from django.urls import resolve, reverse

from apps.accounts.models import Notification, User
from apps.engine.services import run_pass
from apps.tasks.models import Task
from tests.portal.conftest import submit

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


def test_a_reclaim_by_the_engine_notifies_the_tasks_owner_with_a_link_that_opens_its_task(login):
    # Perception borrows the whole on-prem A100 pool (64 GPUs on a 24 GPU reservation) ...
    borrowed = [submit("dev-vision", "perception/gpu-flex", gpus="8") for _ in range(8)]
    run_pass()
    assert {task.state for task in Task.objects.filter(pk__in=[t.pk for t in borrowed])} == {"placed"}
    # ... and Generation, inside its reservation, takes one back: the newest borrowed task is reclaimed.
    submit("dev-generation", "generation/a100-1")
    assert run_pass().preempted == 1
    reclaimed = Task.objects.get(pk__in=[t.pk for t in borrowed], last_preemption_reason="reclaim")
    note = Notification.objects.get(kind=Notification.Kind.PREEMPTED)
    assert note.user.username == "dev-vision" and f"Task {reclaimed}" in note.message
    assert resolve(note.link).view_name == "portal:task" and note.link == reverse(
        "portal:task", args=[reclaimed.pk]
    )
    client = login("dev-vision")
    assert client.get(note.link).status_code == 200
    assert f'<a href="{note.link}">' in client.get("/notifications/").content.decode()
    assert f'<a href="{note.link}">' in client.get("/").content.decode()
    assert login("dev-generation").get(note.link).status_code == 403


def test_a_notification_links_only_to_a_path_of_this_site(login):
    user = User.objects.get(username="dev-agents")
    for link in ("https://evil.example/", "//evil.example/", "javascript:alert(1)"):
        Notification.objects.create(user=user, kind=Notification.Kind.PREEMPTED, message=link, link=link)
    page = login("dev-agents").get("/notifications/").content.decode()
    assert "evil.example/</td>" in page and 'href="https://evil' not in page and 'href="//evil' not in page
    assert 'href="javascript' not in page
