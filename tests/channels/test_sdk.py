"""The Python SDK against a live server: typed records, exceptions carrying the server's field
errors, and retries on connection errors for idempotent calls only."""

from decimal import Decimal

import httpx
import pytest

from apps.tasks.models import Task
from klique.client import Client, ConnectionFailed, InvalidRequest, NotFound, PermissionDenied
from klique.client.sdk import AuthenticationFailed, NotLoggedIn
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
    """Fails the first ``failures`` requests with ``error`` before passing them to the network."""

    def __init__(self, failures: int, error: type[httpx.TransportError]):
        self.failures, self.error, self.attempts = failures, error, 0
        self.real = httpx.HTTPTransport()

    def handle_request(self, request):
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error("flaky network", request=request)
        return self.real.handle_request(request)


def test_reads_are_retried_on_connection_errors(live_server, estate):
    transport = FlakyTransport(2, httpx.ReadError)
    with Client(live_server.url, token_for(estate.member), transport=transport, retries=3) as client:
        assert client.me().username == "vera"
    assert transport.attempts == 3


def test_a_submission_is_not_retried_once_it_may_have_reached_the_server(live_server, estate):
    transport = FlakyTransport(1, httpx.ReadError)
    with Client(live_server.url, token_for(estate.member), transport=transport) as client:
        with pytest.raises(ConnectionFailed):
            client.submit("vision/a100", "train")
    assert transport.attempts == 1


def test_a_submission_is_retried_when_the_connection_was_never_made(live_server, estate):
    transport = FlakyTransport(1, httpx.ConnectError)
    with Client(live_server.url, token_for(estate.member), transport=transport) as client:
        client.submit("vision/a100", "train")
    assert transport.attempts == 2 and Task.objects.count() == 1


def test_retries_give_up_with_connection_failed(estate):
    with Client("http://127.0.0.1:9", token_for(estate.member), retries=1) as client:
        with pytest.raises(ConnectionFailed) as caught:
            client.tasks()
    assert "Cannot reach Klique at http://127.0.0.1:9" in str(caught.value)
