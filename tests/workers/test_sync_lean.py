"""The lean sync path (``apps.workers.api.lean``, ``apps.workers.api.bodies``): a daemon's usual
sync is answered without DRF's request stack, in the same bytes and headers as ``SyncView``; every
other request is left to ``SyncView``, which answers it as before; and a heartbeat or claim body is
read without its serializer only where the serializer would read it, to the same data."""

from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import RequestFactory, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.pools.models import Worker
from apps.workers import services as protocol
from apps.workers.api import bodies, lean, serializers
from apps.workers.api.sync import SyncView

SYNC = "/api/v1/workers/sync"
STEADY = {
    "reports": [],
    "heartbeat": {"tasks": [], "gpus": "8", "free_gpus": "8"},
    "claim": {"slots": ["1"] * 8, "max_tasks": 1},
}
SAME_HEADERS = ("Content-Type", "Allow", "Vary", "WWW-Authenticate", "Retry-After")


def exact(value):
    """``value`` with each leaf's type beside it: ``Decimal("8") == Decimal("8.000")`` and
    ``True == 1``, but a body read differently is not the same data."""
    if isinstance(value, dict):
        return {key: exact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [exact(item) for item in value]
    return (type(value).__name__, str(value))


AMOUNTS = st.one_of(
    st.sampled_from(
        ["8", "8.000", "0.5", "0", "-0", "1e1", "-1", " 8", "８", "8.0001", "1_0", "", "9999999.999"]
    ),
    st.sampled_from(["10000000", "0.0005", ".5", "5.", "1.0", "0.999", "1.001", "00001.000"]),
    st.integers(-2, 10**8),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.none(),
)
SCALARS = st.one_of(st.integers(-3, 3), st.none(), st.text(max_size=3), st.booleans(), st.floats(-2, 2))
HEARTBEATS = st.fixed_dictionaries(
    {},
    optional={
        "tasks": st.one_of(
            st.lists(st.integers(-1, 10**6), max_size=4), st.lists(SCALARS, max_size=3), SCALARS
        ),
        "gpus": AMOUNTS,
        "free_gpus": AMOUNTS,
        "gpu_stats": st.one_of(
            st.lists(st.dictionaries(st.text(max_size=3), SCALARS, max_size=3), max_size=3),
            st.lists(SCALARS, max_size=2),
            SCALARS,
        ),
        "sessions": st.one_of(
            st.just({}), st.dictionaries(st.text(max_size=2), st.just({}), max_size=1), SCALARS
        ),
        "other": SCALARS,
    },
)
CLAIMS = st.fixed_dictionaries(
    {},
    optional={
        "slots": st.one_of(st.lists(AMOUNTS, max_size=9), SCALARS),
        "free_gpus": AMOUNTS,
        "max_tasks": st.one_of(st.integers(-1, 102), SCALARS),
        "multi_node": SCALARS,
        "other": SCALARS,
    },
)
EIGHT_GPUS = Worker(gpus=Decimal("8.000"))


def _agrees(serializer_class, fast, body) -> bool:
    serializer = serializer_class(data=body, context={"worker": EIGHT_GPUS})
    valid = serializer.is_valid()
    if fast is not None:
        assert valid, (body, serializer.errors)
        assert exact(fast) == exact(dict(serializer.validated_data)), body
    return fast is not None


@settings(max_examples=400, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(HEARTBEATS)
def test_lean_heartbeat_body_is_read_only_where_the_serializer_reads_it_to_the_same_data(body):
    _agrees(serializers.HeartbeatSerializer, bodies.heartbeat(body, EIGHT_GPUS), body)


@settings(max_examples=400, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(CLAIMS)
def test_lean_claim_body_is_read_only_where_the_serializer_reads_it_to_the_same_data(body):
    _agrees(serializers.ClaimSerializer, bodies.claim(body, EIGHT_GPUS), body)


@pytest.mark.parametrize(
    ("serializer_class", "read", "body"),
    [
        (serializers.HeartbeatSerializer, bodies.heartbeat, STEADY["heartbeat"]),
        (serializers.HeartbeatSerializer, bodies.heartbeat, {"tasks": [3, 1], "gpu_stats": [{"util": 5}]}),
        (serializers.HeartbeatSerializer, bodies.heartbeat, {"tasks": [], "sessions": {}}),
        (serializers.ClaimSerializer, bodies.claim, STEADY["claim"]),
        (serializers.ClaimSerializer, bodies.claim, {"free_gpus": "4", "max_tasks": 100, "multi_node": True}),
        (serializers.ClaimSerializer, bodies.claim, {"slots": ["0.5", 1, "0.250"]}),
    ],
)
def test_lean_bodies_read_what_daemons_send(serializer_class, read, body):
    assert _agrees(serializer_class, read(body, EIGHT_GPUS), body)


def _both(worker, token, body, **extra):
    """The lean view's answer and SyncView's to the same request."""
    factory = RequestFactory()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", **extra}
    answers = []
    for view in (lean.sync, SyncView.as_view()):
        answer = view(factory.post(SYNC, body, content_type="application/json", **headers))
        if hasattr(answer, "render"):
            answer.render()
        answers.append(answer)
    return answers


def _same(lean_answer, drf_answer) -> None:
    assert lean_answer.status_code == drf_answer.status_code
    assert lean_answer.content == drf_answer.content
    for header in SAME_HEADERS:
        assert lean_answer.get(header) == drf_answer.get(header), header


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        STEADY,
        {},
        {"heartbeat": {"tasks": [], "free_gpus": "9"}},
        {"heartbeat": {"gpus": "lots"}, "claim": {"max_tasks": 0}, "pings": []},
        {"reports": [{"task": 1, "what": "finished"}], "claim": {"free_gpus": "4", "slots": ["1"]}},
        {"reports": [{"task": 999_999, "what": "log", "body": {"tail": "x"}}], "claim": {"free_gpus": 4}},
        [],
    ],
)
def test_lean_sync_answers_in_drfs_bytes_and_headers(enrolment, body):
    token, _ = enrolment
    worker, raw = protocol.enrol(token, hostname="node", gpus=Decimal(8), mode="process", now=timezone.now())
    _same(*_both(worker, raw, body))


@pytest.mark.django_db
def test_lean_sync_of_a_retired_worker_is_401_with_drfs_header(enrolment):
    token, _ = enrolment
    worker, raw = protocol.enrol(token, hostname="node", gpus=Decimal(8), mode="process", now=timezone.now())
    lean.sync(
        RequestFactory().post(
            SYNC, STEADY, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
        )
    )
    protocol.retire(worker, timezone.now())  # its token stays in the cache
    lean_answer, drf_answer = _both(worker, raw, STEADY)
    assert lean_answer.status_code == 401 and lean_answer["WWW-Authenticate"].startswith("Bearer")
    _same(lean_answer, drf_answer)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("call", "status"),
    [
        (lambda client, auth: client.get(SYNC, **auth), 405),
        (
            lambda client, auth: client.post(
                SYNC, "heartbeat=1", content_type="application/x-www-form-urlencoded", **auth
            ),
            415,
        ),
        (lambda client, auth: client.post(SYNC, "{", content_type="application/json", **auth), 400),
        (
            lambda client, auth: client.post(
                SYNC, STEADY, content_type="application/json", HTTP_ACCEPT="image/png", **auth
            ),
            406,
        ),
        (lambda client, auth: client.post(SYNC, STEADY, content_type="application/json"), 401),
        (
            lambda client, auth: client.post(
                SYNC, STEADY, content_type="application/json", HTTP_AUTHORIZATION="Bearer kqw_nope"
            ),
            401,
        ),
        (
            lambda client, auth: client.post(
                SYNC, STEADY, content_type="application/json", HTTP_AUTHORIZATION="Bearer kqe_x"
            ),
            401,
        ),
    ],
)
def test_lean_sync_leaves_other_requests_to_drf_which_answers_as_before(client, enrol, call, status):
    worker, api_client = enrol()
    auth = {"HTTP_AUTHORIZATION": api_client._credentials["HTTP_AUTHORIZATION"]}
    answer = call(client, auth)
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/json" and "detail" in answer.json()
    if status == 401:
        assert answer["WWW-Authenticate"] == 'Bearer realm="klique-workers"'


@pytest.mark.django_db
@override_settings(THROTTLE_RATES={"sync": "3/min"})
def test_lean_sync_counts_each_sync_once_against_the_sync_throttle(enrol):
    cache.clear()
    _, client = enrol(gpus="8")
    answers = [client.post(SYNC, STEADY, format="json") for _ in range(3)]
    answers += [client.post(SYNC, {"heartbeat": []}, format="json")]  # refused before it is read
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert 0 < int(answers[-1]["Retry-After"]) <= 60
    cache.clear()


@pytest.mark.django_db
def test_lean_sync_is_still_described_by_the_schema(client):
    paths = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    assert "post" in paths["/api/v1/workers/sync"]
    assert paths["/api/v1/workers/sync"]["post"]["requestBody"]
