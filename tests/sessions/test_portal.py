"""The developer's page: "Start a session" (compute resource, size, session kind), the list of
their sessions with state, the link once ready, why one stopped, and a Stop button."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.sessions import services
from apps.sessions.models import ProfileIdleLimits
from apps.sessions.selectors import session_token
from apps.tasks.models import Task
from tests.sessions.conftest import sample

pytestmark = pytest.mark.django_db


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_developer_starts_a_session_from_the_portal(estate, jupyter, ide):
    client = browser(estate.member)
    page = client.get("/work/").content.decode()
    assert "Start a session" in page and "code-server" in page
    answer = client.post(
        "/work/",
        {
            "session-compute_resource": estate.vision_sized.pk,
            "session-session_kind": ide.pk,
            "session-gpus": "2",
            "session-name": "my ide",
        },
    )
    assert answer.status_code == 302
    task = Task.objects.get(name="my ide")
    assert (task.kind, task.channel, task.gpus, task.session.kind) == ("session", "portal", 2, ide)
    page = client.get("/work/").content.decode()
    assert f"Session {task.pk} started on vision/a100-any" in page and f'id="session-{task.pk}"' in page


def test_a_refused_session_shows_the_reason_on_its_field(estate, jupyter):
    answer = browser(estate.member).post(
        "/work/",
        {
            "session-compute_resource": estate.vision_a100.pk,
            "session-session_kind": jupyter.pk,
            "session-gpus": "3",
        },
    )
    assert answer.status_code == 400 and "fixed size" in answer.content.decode()
    assert not Task.objects.exists()


def test_another_groups_resource_cannot_be_chosen(estate, jupyter):
    answer = browser(estate.member).post(
        "/work/", {"session-compute_resource": estate.speech_a100.pk, "session-session_kind": jupyter.pk}
    )
    assert answer.status_code == 400 and not Task.objects.exists()


def test_the_link_shows_once_ready_and_why_it_stopped(estate, jupyter, worker, running):
    task = running(
        services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    )
    client = browser(estate.member)
    assert "starting" in client.get("/work/").content.decode()
    url = f"http://gpu-1:41000/sessions/{task.pk}/"
    worker.heartbeat([task.pk], {str(task.pk): sample(timezone.now(), url=url, ready=True, cpu_percent=0.0)})
    page = client.get("/work/").content.decode()
    assert f'href="{url}?token={session_token(task.pk)}"' in page and ">Stop</button>" in page
    other = browser(estate.other_member).get("/work/").content.decode()
    assert session_token(task.pk) not in other
    ProfileIdleLimits.objects.create(profile=estate.vision_a100.profile, cpu_idle_s=60)
    services.check_idle(timezone.now() + timedelta(seconds=61))
    worker.stopped(task.pk)
    page = client.get("/work/").content.decode()
    assert "stopped: idle (cpu limit)" in page and session_token(task.pk) not in page


def test_only_the_owner_or_the_groups_leads_stop_a_session_from_the_portal(estate, jupyter):
    task = services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    refused = browser(estate.other_member).post(f"/work/tasks/{task.pk}/cancel/")
    assert refused.status_code in (403, 404)
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED
    assert browser(estate.member).post(f"/work/tasks/{task.pk}/cancel/").status_code == 302
    task.refresh_from_db()
    assert task.state == Task.State.CANCELED


def test_with_a_gateway_the_owner_shares_a_session_and_the_one_shared_with_sees_its_link(
    estate, jupyter, worker, running, settings
):
    settings.SESSION_GATEWAY_URL = "https://klique.example.org"
    jupyter.open_path = "lab"
    jupyter.save()
    task = running(
        services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    )
    url = f"http://gpu-1:41000/sessions/{task.pk}/"
    worker.heartbeat([task.pk], {str(task.pk): sample(timezone.now(), url=url, ready=True)})
    owner = browser(estate.member)
    link = f'href="https://klique.example.org/sessions/{task.pk}/lab"'
    assert link in owner.get("/work/").content.decode()

    unknown = owner.post(f"/work/sessions/{task.pk}/share/", {"users": "victor nobody-here"}, follow=True)
    assert "no one is called nobody-here" in unknown.content.decode()
    assert not task.session.shared_with.exists()
    assert (
        browser(estate.other_member).post(f"/work/sessions/{task.pk}/share/", {"users": "victor"}).status_code
        == 404
    )

    shared = owner.post(f"/work/sessions/{task.pk}/share/", {"users": "victor"}, follow=True)
    assert f"Session {task.pk} is now shared with victor." in shared.content.decode()
    friend_page = browser(estate.other_member).get("/work/").content.decode()
    assert "Shared with you" in friend_page and link in friend_page
    owner.post(f"/work/sessions/{task.pk}/share/", {"users": ""})
    assert "Shared with you" not in browser(estate.other_member).get("/work/").content.decode()


def test_a_sessions_path_on_the_portal_goes_on_to_the_gateway_after_the_login(estate, settings):
    settings.SESSION_GATEWAY_URL = "http://127.0.0.1:8001"
    page = browser(estate.member).get("/sessions/12/lab?reset")
    assert (page.status_code, page["Location"]) == (302, "http://127.0.0.1:8001/sessions/12/lab?reset")
    assert Client().get("/sessions/12/lab")["Location"].startswith("/accounts/login/?next=/sessions/12/lab")
