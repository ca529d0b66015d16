"""Issue 36's sessions in the browser: a developer starts a JupyterLab session from **My work**, a
real daemon runs it and keeps its tunnel to a real ``klique-gateway``, and the **Open** link loads
JupyterLab in Chromium through the gateway, whose console runs code on the kernel over its
WebSocket; the desktop kind shows noVNC connected to its X display. No session token anywhere."""

import threading
import time

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts.models import User
from apps.engine import services as engine
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.sessions.models import Session, SessionKind
from apps.sessions.selectors import session_token
from apps.tasks.models import Task
from klique.worker import desktop
from klique.worker.client import ControlPlane
from klique.worker.daemon import Daemon, Settings
from klique.worker.process import ProcessRunner
from tests.sessions.gateway import RunningGateway, desktop_kind
from tests.worker import conftest as worker_fixtures
from tests.worker.conftest import fast as fast
from tests.worker.conftest import pool as pool
from tests.worker.test_sessions import stop_all

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
small_estate = worker_fixtures.estate


@pytest.fixture
def stack(live_server, small_estate, pool, tmp_path, fast, settings):
    """The gateway beside the live server (same host name, so the portal's cookie reaches it) and a
    daemon ticking in its own thread."""
    gateway = RunningGateway(live_server.url, host="localhost")
    settings.SESSION_GATEWAY_URL = gateway.url
    raw = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="browser"), now=timezone.now())
    runner = ProcessRunner(tmp_path / "node-1", tmp_path / "checkpoints")
    daemon = Daemon(
        Settings("node-1", raw, ["GPU-0"], poll_min_s=0.05, poll_max_s=0.2),
        ControlPlane(live_server.url),
        runner,
    )
    daemon.enrol()
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            daemon.tick()
            time.sleep(0.05)

    ticking = threading.Thread(target=tick, daemon=True)
    ticking.start()
    yield gateway, daemon
    stop.set()
    ticking.join(10)
    stop_all(runner)
    daemon.tunnel.stop()
    daemon.client.close()
    gateway.stop()


def logged_in(chromium, live_server, user):
    client = Client()
    client.force_login(user)
    context = chromium.new_context(viewport={"width": 1366, "height": 900})
    context.add_cookies(
        [
            {"name": name, "value": morsel.value, "url": live_server.url}
            for name, morsel in client.cookies.items()
        ]
    )
    return context


def started_from_the_portal(context, live_server, small_estate, kind: SessionKind) -> tuple[Task, str]:
    """Start a session of ``kind`` from My work; once it runs, its Open link."""
    resource, _ = small_estate
    page = context.new_page()
    page.goto(f"{live_server.url}/work/")
    page.select_option("#id_session-compute_resource", str(resource.pk))
    page.select_option("#id_session-session_kind", str(kind.pk))
    page.click("#session-form button[type=submit]")
    page.wait_for_selector("text=its link shows here once it is ready")
    task = Task.objects.filter(kind=Task.Kind.SESSION).latest("pk")
    deadline = time.monotonic() + 120
    while not Session.objects.filter(pk=task.pk, ready=True).exists():
        assert time.monotonic() < deadline, "the session never came up"
        engine.run_pass()
        time.sleep(0.5)
    time.sleep(1)  # the daemon's next tick routes the session through its tunnel
    page.goto(f"{live_server.url}/work/")
    link = page.get_attribute(f"#session-{task.pk} a:has-text('Open')", "href")
    page.close()
    assert session_token(task.pk) not in link
    return task, link


def test_jupyterlab_opens_through_the_gateway_and_its_console_runs_code(
    chromium, live_server, stack, small_estate
):
    gateway, _ = stack
    kind = SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER, open_path="lab")
    context = logged_in(chromium, live_server, User.objects.get(username="ada"))
    task, link = started_from_the_portal(context, live_server, small_estate, kind)
    assert link == f"{gateway.url}/sessions/{task.pk}/lab"
    lab = context.new_page()
    lab.goto(link + "?reset")  # the launcher, not a workspace another run of the same user left
    lab.wait_for_selector(".jp-LauncherCard[data-category='Console']", timeout=90_000)
    lab.click(".jp-LauncherCard[data-category='Console']")
    prompt = lab.wait_for_selector(".jp-CodeConsole-input .cm-content", timeout=60_000)
    lab.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=90_000)  # its WebSocket is open
    prompt.click()
    lab.keyboard.type("print(6 * 7)")
    lab.keyboard.press("Shift+Enter")
    lab.wait_for_selector(".jp-OutputArea-output:has-text('42')", timeout=60_000)
    context.close()


@pytest.mark.skipif(bool(desktop.missing()), reason="needs Debian's " + " ".join(desktop.PACKAGES))
def test_the_desktop_opens_through_the_gateway_in_novnc(chromium, live_server, stack, small_estate):
    kind = desktop_kind()
    context = logged_in(chromium, live_server, User.objects.get(username="ada"))
    _, link = started_from_the_portal(context, live_server, small_estate, kind)
    screen = context.new_page()
    screen.goto(link)
    screen.wait_for_function(
        "() => { const c = document.querySelector('#noVNC_container canvas'); return c && c.width > 0 }",
        timeout=60_000,
    )
    assert "Connected" in (screen.text_content("#noVNC_status") or "") or screen.locator("canvas").count()
    context.close()
