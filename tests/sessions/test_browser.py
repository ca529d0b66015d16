"""In headless Chromium: a developer starts a session from the portal, sees it starting, then the
link (with its token) once its worker reports it ready, and stops it."""

import pytest
from django.utils import timezone

from apps.portal import demo
from apps.sessions.selectors import session_token
from apps.tasks.models import Task
from tests.browser.conftest import chromium as chromium  # the fixtures
from tests.browser.conftest import session as session
from tests.sessions.conftest import Worker, place, sample


@pytest.fixture
def seeded(transactional_db):
    demo.seed()  # its session kinds: JupyterLab, its editor as the IDE, the desktop


def test_a_developer_starts_a_session_from_the_portal_and_sees_the_link(seeded, session):
    browser = session()
    browser.log_in("dev-pretraining")
    page = browser.open("/work/")
    page.select_option("#id_session-compute_resource", label="pretraining/h100-8")
    page.select_option("#id_session-session_kind", label="JupyterLab")
    page.fill("#id_session-name", "notebook from the browser")
    page.click("#session-form button[type=submit]")
    page.wait_for_url(browser.server + "/work/")
    assert "started on pretraining/h100-8" in page.inner_text(".notice")
    task = Task.objects.get(name="notebook from the browser")
    assert (task.kind, task.channel) == ("session", "portal")
    assert "Waiting" in page.locator(f"#session-{task.pk}").inner_text()

    pool = task.compute_resource.profile.pools.order_by("name").first()
    worker = Worker(pool, hostname="browser-gpu", gpus="64")
    place(task, pool)
    assert task.pk in [t["id"] for t in worker.claim().data["tasks"]]
    worker.started(task.pk)
    url = f"http://browser-gpu:41000/sessions/{task.pk}/"
    worker.heartbeat([task.pk], {str(task.pk): sample(timezone.now(), url=url, ready=True)})

    page = browser.open("/work/")
    row = page.locator(f"#session-{task.pk}")
    assert "ready" in row.inner_text()
    assert row.locator("a", has_text="Open").get_attribute("href") == f"{url}?token={session_token(task.pk)}"
    row.locator("button", has_text="Stop").click()
    page.wait_for_url(browser.server + f"/work/tasks/{task.pk}/")
    task.refresh_from_db()
    assert (task.state, task.stop_reason) == ("stopping", "canceled")
    assert browser.errors == []
