"""The Python SDK against a live server: typed records, exceptions carrying the server's field
errors, and retries: idempotent calls on connection errors and timeouts, the others only when the
connection was never made."""

from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest

from apps.core.pagination import LimitOffset
from apps.tasks import services
from apps.tasks.models import Schedule, Task
from klique.client import Client, ConnectionFailed, InvalidRequest, NotFound, PermissionDenied
from klique.client.sdk.errors import AuthenticationFailed, NotLoggedIn
from tests.channels.conftest import token_for
from tests.channels.live import finish, place, preempt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sdk(live_server, estate):
    with Client(live_server.url, token_for(estate.member)) as client:
        yield client


def test_compute_resources_come_back_typed_with_exact_decimals(sdk):
    resources = {r.name: r for r in sdk.compute_resources()}
    quarter = resources["vision/a100-quarter"]
    assert quarter.gpus == Decimal("0.25") and isinstance(quarter.gpus, Decimal)
    assert (
        quarter.group == "vision" and quarter.group_name == "Vision" and quarter.time_weight == Decimal("0.5")
    )


def test_submit_wait_and_read_back_through_the_sdk_channel(sdk, estate):
    task = sdk.submit(
        "vision/a100-any", ["python", "train.py", "--name", "a b"], gpus=Decimal("2"), project="detector"
    )
    stored = Task.objects.get(pk=task.id)
    assert stored.channel == "sdk" and stored.command == "python train.py --name 'a b'"
    assert task.gpus == 2 and task.queue_position == 1 and task.verdict is None and task.project == "detector"
    place(task.id, estate.pool)
    preempt(task.id, Task.StopReason.BUDGET)
    Task.objects.filter(pk=task.id).update(
        verdict={"rule": "budget_used_up", "message": "Vision's weekly budget is used up.", "left": "0"}
    )
    waiting = sdk.task(task.id)
    assert waiting.verdict.rule == "budget_used_up" and waiting.verdict.details == {"left": "0"}
    assert [(p.kind, p.reason) for p in waiting.preemptions] == [
        ("preempted", "budget"),
        ("requeued", "budget"),
    ]
    place(task.id, estate.pool)
    finish(task.id, 0)
    seen = []
    done = sdk.wait(task.id, poll=0.05, on_change=seen.append)
    assert done.state == "succeeded" and done.done and seen[-1].state == "succeeded"
    assert [t.id for t in sdk.tasks(state="succeeded")] == [task.id]


def test_cancel_and_usage(sdk, estate):
    task = sdk.submit("vision/a100", "sleep 60")
    assert sdk.cancel(task.id).state == "canceled"
    (usage,) = sdk.usage()
    assert usage.group == "vision" and usage.budget_hours == Decimal(100) and usage.period == "week"


def test_refusals_raise_typed_errors_carrying_the_fields(sdk, estate):
    with pytest.raises(InvalidRequest) as caught:
        sdk.submit("vision/a100", "train", gpus="0.5")
    assert caught.value.status == 400 and "fixed size" in caught.value.errors["gpus"][0]
    with pytest.raises(InvalidRequest) as caught:
        sdk.submit("speech/a100", "train")
    assert "Unknown compute resource" in caught.value.errors["compute_resource"][0]
    with pytest.raises(NotFound):
        sdk.task(10**9)
    theirs = sdk.submit("vision/a100", "x")
    Task.objects.filter(pk=theirs.id).update(user=estate.other_member)
    with pytest.raises(NotFound):
        sdk.cancel(theirs.id)


def test_a_forbidden_submission_raises_permission_denied(live_server, estate):
    with Client(live_server.url, token_for(estate.it)) as it, pytest.raises(PermissionDenied) as caught:
        it.submit("speech/a100", "train")
    assert caught.value.status == 403


def test_a_bad_token_raises_authentication_failed_and_no_token_is_not_logged_in(live_server):
    with Client(live_server.url, "kqp_nope") as client, pytest.raises(AuthenticationFailed):
        client.me()
    with pytest.raises(NotLoggedIn):
        Client(live_server.url, "")


def test_schedules_through_the_sdk(sdk):
    schedule = sdk.create_schedule("vision/a100", ["train.py"], cron="15 3 * * 1", name="weekly")
    assert schedule.active and schedule.next_run_at.weekday() == 0 and schedule.owner == "vera"
    assert sdk.update_schedule(schedule.id, active=False).active is False
    assert [s.name for s in sdk.schedules()] == ["weekly"]
    sdk.delete_schedule(schedule.id)
    with pytest.raises(NotFound):
        sdk.schedule(schedule.id)


class FlakyTransport(httpx.BaseTransport):
    """Fails the first ``failures`` requests with ``error``: before they reach the network, or,
    with ``after_sending``, after the server handled them (the reply is lost on the way back)."""

    def __init__(self, failures: int, error: type[httpx.TransportError], *, after_sending: bool = False):
        self.failures, self.error, self.after_sending, self.attempts = failures, error, after_sending, 0
        self.real = httpx.HTTPTransport()

    def handle_request(self, request):
        self.attempts += 1
        if self.attempts > self.failures:
            return self.real.handle_request(request)
        if self.after_sending:
            self.real.handle_request(request).read()
        raise self.error("flaky network", request=request)


def flaky(live_server, estate, *args, **kwargs):
    transport = FlakyTransport(*args, **kwargs)
    return Client(live_server.url, token_for(estate.member), transport=transport, retries=3), transport


@pytest.mark.parametrize(
    "error", [httpx.ReadError, httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ConnectError]
)
def test_reads_are_retried_on_connection_errors_and_timeouts(live_server, estate, error):
    client, transport = flaky(live_server, estate, 2, error)
    with client:
        assert client.me().username == "vera"
    assert transport.attempts == 3


def test_a_transport_error_that_is_not_a_connection_error_is_not_retried(live_server, estate):
    client, transport = flaky(live_server, estate, 1, httpx.UnsupportedProtocol)
    with client, pytest.raises(ConnectionFailed):
        client.me()
    assert transport.attempts == 1


def test_a_cancel_is_idempotent_so_it_is_retried_after_a_lost_reply(live_server, estate):
    task = services.submit(user=estate.member, compute_resource=estate.vision_a100, command="x")
    client, transport = flaky(live_server, estate, 1, httpx.ReadError, after_sending=True)
    with client:
        assert client.cancel(task.pk).state == "canceled"
    assert transport.attempts == 2 and task.events.filter(kind="canceled").count() == 1


def test_a_delete_whose_reply_was_lost_counts_as_done_on_the_retrys_404(live_server, estate):
    schedule = services.create_schedule(
        owner=estate.member, name="n", cron="0 2 * * *", compute_resource=estate.vision_a100, command="x"
    )
    client, transport = flaky(live_server, estate, 1, httpx.ReadTimeout, after_sending=True)
    with client:
        assert client.delete_schedule(schedule.pk) is None
    assert transport.attempts == 2 and not Schedule.objects.exists()


def test_a_delete_of_an_unknown_schedule_is_not_found_when_no_try_reached_the_server(live_server, estate):
    with Client(live_server.url, token_for(estate.member)) as client, pytest.raises(NotFound):
        client.delete_schedule(10**9)
    client, transport = flaky(live_server, estate, 1, httpx.ConnectError)
    with client, pytest.raises(NotFound):
        client.delete_schedule(10**9)
    assert transport.attempts == 2


@pytest.mark.parametrize("error", [httpx.ReadError, httpx.ReadTimeout, httpx.RemoteProtocolError])
@pytest.mark.parametrize("call", ["submit", "create_schedule", "update_schedule"])
def test_a_post_or_patch_is_not_retried_once_it_may_have_reached_the_server(live_server, estate, call, error):
    schedule = services.create_schedule(
        owner=estate.member, name="n", cron="0 2 * * *", compute_resource=estate.vision_a100, command="x"
    )
    client, transport = flaky(live_server, estate, 1, error, after_sending=True)
    calls = {
        "submit": lambda: client.submit("vision/a100", "train"),
        "create_schedule": lambda: client.create_schedule("vision/a100", "x", cron="0 3 * * *", name="m"),
        "update_schedule": lambda: client.update_schedule(schedule.pk, cron="0 4 * * *"),
    }
    with client, pytest.raises(ConnectionFailed):
        calls[call]()
    assert transport.attempts == 1
    # The one try did reach the server: exactly one task or schedule, not two.
    assert Task.objects.count() == (call == "submit") and Schedule.objects.count() == 1 + (
        call == "create_schedule"
    )


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout])
@pytest.mark.parametrize("call", ["submit", "create_schedule", "update_schedule"])
def test_a_post_or_patch_is_retried_when_the_connection_was_never_made(live_server, estate, call, error):
    schedule = services.create_schedule(
        owner=estate.member, name="n", cron="0 2 * * *", compute_resource=estate.vision_a100, command="x"
    )
    client, transport = flaky(live_server, estate, 2, error)
    calls = {
        "submit": lambda: client.submit("vision/a100", "train"),
        "create_schedule": lambda: client.create_schedule("vision/a100", "x", cron="0 3 * * *", name="m"),
        "update_schedule": lambda: client.update_schedule(schedule.pk, cron="0 4 * * *"),
    }
    with client:
        calls[call]()
    assert transport.attempts == 3
    assert Task.objects.count() == (call == "submit") and Schedule.objects.count() == 1 + (
        call == "create_schedule"
    )


def test_retries_give_up_with_connection_failed(estate):
    with Client("http://127.0.0.1:9", token_for(estate.member), retries=1) as client:
        with pytest.raises(ConnectionFailed) as caught:
            client.tasks()
    assert "Cannot reach Klique at http://127.0.0.1:9" in str(caught.value)


def test_one_compute_resource_by_id_and_the_resource_filters(sdk, estate):
    services.submit(user=estate.member, compute_resource=estate.vision_a100, command="x")
    resource = sdk.compute_resource(estate.vision_a100.pk)
    assert (resource.name, resource.waiting, resource.running) == ("vision/a100", 1, 0)
    with pytest.raises(NotFound):
        sdk.compute_resource(estate.speech_a100.pk)
    assert [r.name for r in sdk.compute_resources(profile="a100-quarter")] == ["vision/a100-quarter"]
    assert len(sdk.compute_resources(group="vision")) == 3 and sdk.compute_resources(group="speech") == []


def test_the_task_list_takes_every_filter_the_api_has(live_server, estate):
    def task(user, resource, **fields):
        return services.submit(user=user, compute_resource=resource, command="x", **fields).pk

    vision_cli = task(estate.member, estate.vision_a100, channel="cli", project=estate.project)
    vision_sdk = task(estate.other_member, estate.vision_quarter, channel="sdk")
    speech = task(estate.lead, estate.speech_a100, channel="cli")
    Task.objects.filter(pk=vision_cli).update(submitted_at=datetime(2026, 1, 1, tzinfo=UTC))
    with Client(live_server.url, token_for(estate.it)) as it:

        def ids(**filters):
            return {t.id for t in it.tasks(**filters)}

        assert ids() == {vision_cli, vision_sdk, speech}
        assert ids(group="vision") == {vision_cli, vision_sdk}
        assert ids(user="sam") == {speech}
        assert ids(project="detector") == {vision_cli}
        assert ids(channel="cli") == {vision_cli, speech}
        assert ids(compute_resource="vision/a100-quarter") == {vision_sdk}
        assert ids(submitted_before=datetime(2026, 1, 2, tzinfo=UTC)) == {vision_cli}
        assert ids(submitted_after="2026-01-02T00:00:00+00:00") == {vision_sdk, speech}
        assert ids(group="vision", channel="cli", state=["queued", "running"]) == {vision_cli}
        with pytest.raises(InvalidRequest) as caught:
            it.tasks(channel="telepathy")
        assert "channel" in caught.value.errors


def test_the_task_list_follows_pages_up_to_its_limit(sdk, estate, monkeypatch):
    monkeypatch.setattr(LimitOffset, "max_limit", 2)
    made = [
        services.submit(user=estate.member, compute_resource=estate.vision_a100, command=f"{i}").pk
        for i in range(5)
    ]
    assert [t.id for t in sdk.tasks(limit=3)] == made[::-1][:3]
    assert [t.id for t in sdk.tasks(limit=50)] == made[::-1]
