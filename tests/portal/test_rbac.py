"""Every demo role x every portal URL, GET and POST: the allowed answer or the refusal (403; 404
where the object is looked up among the person's own, 400 where a form does not offer it), and
every URL needs login. A department head sees only their department's subtree, a team lead only
their group, a member only their own work. Finance and leadership at the organisation's root
(``finance``, ``cio``) see the whole estate; finance and leadership of the Research business unit
(``finance-research``, ``cio-research``) see Research's subtree only, never Products'.

The matrix covers the whole URL map of the portal, the reports, the prices and the account pages:
``test_the_matrix_covers_every_url_of_the_portal`` walks the URL resolver, so a new URL fails the
tests until the matrix says who may use it. Each request runs in a savepoint that is rolled back,
so one answer (a removed member, a deleted price) never changes the next."""

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

import pytest
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from apps.accounts import agents
from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, Notification, Project, User
from apps.cloud import services as cloud
from apps.governance import services as governance
from apps.ledger.closing import close_month
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.pools.models import GpuType
from apps.pricing.models import NodePrice, Price
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

ROLES = [
    "it",
    "cio",
    "finance",
    "cio-research",
    "finance-research",
    "head-language",
    "lead-pretraining",
    "dev-pretraining",
    "dev-alignment",
]
ESTATE = {"it", "cio", "finance"}
# Finance and leadership of the Research business unit: its subtree's figures, pages and work.
RESEARCH = {"cio-research", "finance-research"}
EVERYONE = set(ROLES)
PRICE_EDITORS = {"it", "finance"}
MANAGE_PRETRAINING = {"it", "head-language", "lead-pretraining"}
PRETRAINING_WORK = MANAGE_PRETRAINING | {"dev-pretraining"}
ALIGNMENT_WORK = {"it", "head-language", "dev-alignment"}
NAMESPACES = {"portal", "ledger", "pricing", "accounts"}
ADVISOR = {"it", "cio", "cio-research", "head-language"}


@dataclass(frozen=True)
class Rule:
    """Who may: those ``allowed`` get ``ok``, everyone else ``refused``."""

    allowed: set[str]
    ok: int = 200
    refused: int = 403
    data: dict = field(default_factory=dict)  # the POST body; values are formatted like the URL


def posted(allowed: set[str], ok: int = 302, refused: int = 403, **data) -> Rule:
    return Rule(allowed, ok, refused, data)


# "METHOD url" -> who may. {placeholders} are filled per test by the ``ids`` fixture.
MATRIX = {
    "GET /": Rule(EVERYONE),
    "GET /leadership/": Rule({"it", "cio", "cio-research"}),
    "POST /leadership/cloud-caps/": posted({"cio"}, group="{acme}", amount="1000", currency="EUR"),
    "POST /leadership/cloud-caps/{cloud_cap}/remove/": posted({"cio", "cio-research"}),
    "POST /leadership/cloud-caps/{products_cap}/remove/": posted({"cio"}),
    "GET /leadership/split/": Rule({"it", "cio"}),
    "POST /leadership/split/": posted({"it", "cio"}, split="acme"),
    "GET /tenants/language/": Rule({"it"}),
    "GET /it/": Rule({"it"}),
    "GET /finance/": Rule(ESTATE | RESEARCH),
    # The month close: finance, leadership and IT see it; IT and finance at the root close and reopen.
    "GET /finance/months/": Rule(ESTATE | RESEARCH),
    "POST /finance/months/close/": posted(PRICE_EDITORS, month="2026-01"),
    "POST /finance/months/{month_close}/reopen/": posted(PRICE_EDITORS, reason="Wrong prices."),
    "POST /finance/months/sweep/": posted(PRICE_EDITORS),
    # The cloud bill (issue 37): finance and IT at the root import, reconcile and book; a POST
    # without its file or pool is a 400 (tests/cloud/test_bill_faces.py posts real ones).
    "GET /finance/bills/": Rule(PRICE_EDITORS),
    "GET /finance/bills/?month=2026-02": Rule(PRICE_EDITORS),
    "POST /finance/bills/import/": posted(PRICE_EDITORS, ok=400, month="2026-02"),
    "POST /finance/bills/book/": posted(PRICE_EDITORS, ok=400, month="2026-02", pool="0"),
    # Statements and the cost-centre cut: the reports' own rule.
    "GET /reports/statements/": Rule(EVERYONE),
    "GET /reports/statements/?group=language&month=2026-02&format=pdf": Rule(
        ESTATE | RESEARCH | {"head-language"}
    ),
    "GET /reports/statements/?group=pretraining&month=2026-02&format=csv": Rule(
        ESTATE | RESEARCH | MANAGE_PRETRAINING | {"dev-pretraining"}
    ),
    "GET /reports/statements/?group=products&month=2026-02&format=pdf": Rule(ESTATE),
    "GET /reports/statements/?group=ranking&month=2026-02&format=csv": Rule(ESTATE),
    "GET /reports/statements/?group=language&idle=spread&format=csv": Rule(ESTATE),
    "GET /reports/cost-centres/?month=2026-02": Rule(EVERYONE),
    "GET /departments/language/": Rule(ESTATE | RESEARCH | {"head-language"}),
    "GET /departments/vision/": Rule(ESTATE | RESEARCH),
    "GET /departments/search/": Rule(ESTATE),
    "GET /departments/language/split/": Rule({"it", "head-language"}),
    "GET /departments/vision/split/": Rule({"it"}),
    "GET /departments/language/lend/": Rule({"it", "head-language"}),
    "GET /departments/vision/lend/": Rule({"it"}),
    "POST /departments/language/split/": posted({"it", "head-language"}, split="language"),
    "POST /departments/vision/split/": posted({"it"}, split="vision"),
    "GET /teams/pretraining/": Rule(ESTATE | RESEARCH | MANAGE_PRETRAINING),
    "GET /teams/alignment/": Rule(ESTATE | RESEARCH | {"head-language"}),
    "GET /teams/perception/": Rule(ESTATE | RESEARCH),
    "GET /teams/ranking/": Rule(ESTATE),
    "POST /teams/pretraining/members/": posted(MANAGE_PRETRAINING, user="dev-ranking"),
    "POST /teams/perception/members/": posted({"it"}, user="dev-ranking"),
    "POST /teams/pretraining/members/{pretraining_member}/remove/": posted(MANAGE_PRETRAINING),
    "POST /teams/perception/members/{perception_member}/remove/": posted({"it"}),
    "POST /teams/pretraining/projects/{pretraining_project}/priority/": posted(
        MANAGE_PRETRAINING, priority="5"
    ),
    "POST /teams/perception/projects/{perception_project}/priority/": posted({"it"}, priority="5"),
    "GET /work/": Rule(EVERYONE),
    # Submitting: the form offers only the compute resources of the person's own groups.
    "POST /work/": posted(
        {"lead-pretraining", "dev-pretraining"}, refused=400, compute_resource="{h100}", command="sleep 1"
    ),
    "GET /work/tasks/{pretraining_task}/": Rule(ESTATE | RESEARCH | PRETRAINING_WORK),
    "GET /work/tasks/{alignment_task}/": Rule(ESTATE | RESEARCH | ALIGNMENT_WORK),
    "GET /work/tasks/{ranking_task}/": Rule(ESTATE),
    "POST /work/tasks/{pretraining_task}/cancel/": posted(PRETRAINING_WORK),
    "POST /work/tasks/{alignment_task}/cancel/": posted(ALIGNMENT_WORK),
    # A session's path on the portal: 404 without a session gateway (the tests set none).
    "GET /sessions/{dev_session}/lab": Rule(set(), refused=404),
    "GET /sessions/{dev_session}/": Rule(set(), refused=404),
    # Only its owner shares a session; it is not found among anyone else's.
    "POST /work/sessions/{dev_session}/share/": posted(
        {"dev-pretraining"}, refused=404, users="lead-pretraining"
    ),
    "GET /notifications/": Rule(EVERYONE),
    "POST /notifications/{my_notification}/read/": posted(EVERYONE),
    # Another person's notification is not found among yours.
    "POST /notifications/{dev_notification}/read/": posted({"dev-pretraining"}, refused=404),
    "POST /notifications/read-all/": posted(EVERYONE),
    "GET /reports/": Rule(EVERYONE),
    "GET /reports/?by=group&group=alignment": Rule(ESTATE | RESEARCH | {"head-language", "dev-alignment"}),
    "GET /reports/?by=group&group=products": Rule(ESTATE),
    "GET /reports/?by=group&group=ranking&export=csv": Rule(ESTATE),
    "GET /reports/?by=group&group=ranking&export=xlsx": Rule(ESTATE),
    "GET /reports/?by=group&idle=spread": Rule(ESTATE),
    "GET /prices/": Rule(EVERYONE),
    "GET /prices/new/": Rule(PRICE_EDITORS),
    "POST /prices/new/": posted(
        PRICE_EDITORS, gpu_type="{cpu}", currency="EUR", per_gpu_hour="0.10", effective_from="2026-06-01"
    ),
    "GET /prices/{price}/edit/": Rule(PRICE_EDITORS),
    "POST /prices/{price}/edit/": posted(
        PRICE_EDITORS,
        gpu_type="{h100_type}",
        currency="EUR",
        per_gpu_hour="3.50",
        effective_from="2026-01-01",
    ),
    "GET /prices/{price}/delete/": Rule(PRICE_EDITORS),
    "POST /prices/{price}/delete/": posted(PRICE_EDITORS),
    "GET /prices/changes/": Rule(ESTATE),
    "GET /prices/nodes/new/": Rule(PRICE_EDITORS),
    "POST /prices/nodes/new/": posted(
        PRICE_EDITORS,
        instance_type="p5.48xlarge",
        market="spot",
        currency="EUR",
        per_node_hour="30.00",
        effective_from="2026-06-01",
    ),
    "GET /prices/nodes/{node_price}/edit/": Rule(PRICE_EDITORS),
    "POST /prices/nodes/{node_price}/edit/": posted(
        PRICE_EDITORS,
        instance_type="local.h100x8",
        market="on-demand",
        currency="EUR",
        per_node_hour="28.00",
        effective_from="2026-01-01",
    ),
    "GET /prices/nodes/{node_price}/delete/": Rule(PRICE_EDITORS),
    "POST /prices/nodes/{node_price}/delete/": posted(PRICE_EDITORS),
    "GET /account/tokens/": Rule(EVERYONE),
    "POST /account/tokens/": posted(EVERYONE, ok=201, name="matrix", expires_in="30"),
    "POST /account/tokens/{my_token}/revoke/": posted(EVERYONE),
    # Another person's token is not found among yours.
    "POST /account/tokens/{dev_token}/revoke/": posted({"dev-pretraining"}, refused=404),
    # Agents: the owner and the leads over the owner's group (and IT) may cap and kill; others do not see it.
    "GET /account/agents/": Rule(EVERYONE),
    "POST /account/agents/": posted(EVERYONE, ok=201, name="matrix-bot"),
    "POST /account/agents/{dev_agent}/caps/": posted(
        {"it", "head-language", "lead-pretraining", "dev-pretraining"}, refused=404, max_gpus="4"
    ),
    "POST /account/agents/{dev_agent}/kill/": posted(
        {"it", "head-language", "lead-pretraining", "dev-pretraining"}, refused=404
    ),
    # Change requests: Pretraining's lead asks, Language's head decides (tests/governance).
    "GET /requests/": Rule(EVERYONE),
    "GET /requests/new/pretraining/": Rule({"head-language", "lead-pretraining"}),
    "POST /requests/new/pretraining/": posted(
        {"head-language", "lead-pretraining"}, kind="quota", reservation="56", justification="More GPUs."
    ),
    "GET /requests/{change_request}/": Rule({"head-language", "lead-pretraining"}, refused=404),
    "POST /requests/{change_request}/decide/": posted({"head-language"}, decision="approve"),
    "POST /requests/{change_request}/withdraw/": posted({"lead-pretraining"}),
    # Webhooks: IT and the head or lead of the group itself (not the heads above it).
    "GET /groups/pretraining/webhooks/": Rule({"it", "lead-pretraining"}),
    "GET /groups/language/webhooks/": Rule({"it", "head-language"}),
    "GET /groups/perception/webhooks/": Rule({"it"}),
    "POST /groups/pretraining/webhooks/": posted(
        {"it", "lead-pretraining"}, url="https://hooks.example.com/m", format="slack", kinds="preemption"
    ),
    "POST /groups/pretraining/webhooks/{pretraining_webhook}/test/": posted({"it", "lead-pretraining"}),
    "POST /groups/perception/webhooks/{perception_webhook}/test/": posted({"it"}),
    "POST /groups/pretraining/webhooks/{pretraining_webhook}/remove/": posted({"it", "lead-pretraining"}),
    "POST /groups/perception/webhooks/{perception_webhook}/remove/": posted({"it"}),
    # What-if runs: IT only (tests/whatif/test_page.py).
    "GET /it/whatif/": Rule({"it"}),
    "POST /it/whatif/": posted(
        {"it"},
        start="2026-01-05T00:00",
        end="2026-01-06T00:00",
        wait_threshold_s="3600",
        **{"changes-TOTAL_FORMS": "1", "changes-INITIAL_FORMS": "0", "changes-0-kind": "reservations"},
        **{"changes-0-target": "group:vision", "changes-0-value": "64"},
    ),
    "GET /it/whatif/{whatif_run}/": Rule({"it"}),
    "GET /it/whatif/{whatif_run}/status/": Rule({"it"}),
    "GET /it/whatif/{whatif_run}/csv/": Rule({"it"}),
    # The quota advisor (tests/whatif/test_advisor_page.py): heads see their departments' groups,
    # leadership theirs, IT all; leadership and IT propose; heads and leadership accept.
    "GET /advisor/": Rule(ADVISOR),
    "POST /advisor/": posted({"it", "cio", "cio-research"}, start="2026-01-05", end="2026-01-06"),
    "GET /advisor/{advisor_proposal}/": Rule(ADVISOR),
    "POST /advisor/{advisor_proposal}/accept/pretraining/": posted(
        {"cio", "cio-research", "head-language"}, reservation="1", limit=""
    ),
}


def _whatif_run() -> int:
    """A done what-if run with an empty comparison (the figures are tests/whatif's)."""
    from datetime import UTC, datetime

    from apps.whatif.models import WhatIfRun

    side = {"groups": {}, "pools": {}, "preemptions": {"budget": 0, "reclaim": 0}, "tasks": {}}
    report = {"wait_threshold_s": 3600, "changes": {}, "base": side, "changed": side, "difference": side}
    start, end = datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC)
    return WhatIfRun.objects.create(start=start, end=end, state="done", progress=1, report=report).pk


def _advisor_proposal() -> int:
    """A proposal of one row: pretraining's reservation down to 1 GPU (tests/whatif's figures)."""
    from datetime import UTC, datetime

    from apps.whatif.models import AdvisorProposal

    policy = ResourcePolicy.objects.get(group__slug="pretraining")
    figures = {"reservation": str(policy.reservation), "limit": str(policy.limit), "budget_hours": None}
    row = {
        "group": "pretraining",
        "name": "Pretraining",
        "parent": "language",
        "current": figures | {"budget_period": ""},
        "proposed": figures | {"reservation": "1.000", "budget_period": ""},
        "measured": dict.fromkeys(
            ("gpu_hours", "borrowed_gpu_hours", "idle_reserved_gpu_hours", "start_p95_s", "guarantee_start_s")
        ),
        "reasons": [],
        "changed": True,
    }
    start, end = datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC)
    return AdvisorProposal.objects.create(start=start, end=end, groups=[row]).pk


def _split_data(slug: str) -> dict[str, str]:
    """The quota split form of a department, sent back unchanged."""
    data = {}
    for policy in ResourcePolicy.objects.filter(group__parent__slug=slug):
        data |= {
            f"p{policy.pk}-reservation": str(policy.reservation),
            f"p{policy.pk}-limit": str(policy.limit),
            f"p{policy.pk}-budget_hours": "" if policy.budget_hours is None else str(policy.budget_hours),
            f"p{policy.pk}-budget_period": policy.budget_period,
            f"p{policy.pk}-version": str(policy.version),
        }
    return data


def _unit_people() -> None:
    """Finance and leadership of the Research business unit (not in the demo estate)."""
    research = Group.objects.get(slug="research")
    for username, role in (
        ("finance-research", Membership.Role.FINANCE),
        ("cio-research", Membership.Role.LEADERSHIP),
    ):
        accounts.add_membership(user=User.objects.create(username=username), group=research, role=role)


@pytest.fixture
def ids(estate):
    """The objects the matrix's URLs name; ``my_*`` are filled per role by ``requests``."""
    _unit_people()
    dev = User.objects.get(username="dev-pretraining")
    return {
        "pretraining_task": submit("dev-pretraining", "pretraining/h100-8").pk,
        "alignment_task": submit("dev-alignment", "alignment/a100-1").pk,
        "ranking_task": submit("dev-ranking", "ranking/l40s-1").pk,
        "dev_session": _session(dev),
        "pretraining_member": Membership.objects.get(user=dev, group__slug="pretraining").pk,
        "perception_member": Membership.objects.get(user__username="dev-vision", group__slug="perception").pk,
        "pretraining_project": Project.objects.get(name="llm-7b").pk,
        "perception_project": Project.objects.get(name="detector-v3").pk,
        "h100": ComputeResource.objects.get(name="pretraining/h100-8").pk,
        "price": Price.objects.get(gpu_type__name="H100").pk,
        "node_price": NodePrice.objects.get(instance_type="local.h100x8", market="on-demand").pk,
        "h100_type": GpuType.objects.get(name="H100").pk,
        "cpu": GpuType.objects.get(name="CPU").pk,
        "dev_notification": _notification(dev),
        "dev_token": accounts.create_api_token(user=dev, name="dev's")[0].pk,
        "dev_agent": agents.create_agent(owner=dev, name="dev-bot")[0].pk,
        "acme": Group.objects.get(slug="acme").pk,
        "month_close": close_month(date(2026, 2, 1)).pk,
        "change_request": governance.file_request(
            requester=User.objects.get(username="lead-pretraining"),
            group=Group.objects.get(slug="pretraining"),
            reservation=Decimal("56"),
            justification="More GPUs.",
        ).pk,
        "cloud_cap": cloud.set_cap(
            Group.objects.get(slug="research"), Decimal(500), "EUR", actor=None, via="api"
        ).pk,
        "products_cap": cloud.set_cap(
            Group.objects.get(slug="products"), Decimal(500), "EUR", actor=None, via="api"
        ).pk,
        "pretraining_webhook": _webhook("pretraining"),
        "perception_webhook": _webhook("perception"),
        "whatif_run": _whatif_run(),
        "advisor_proposal": _advisor_proposal(),
    }


def _session(user: User) -> int:
    from apps.sessions import services as sessions
    from apps.sessions.models import SessionKind

    kind = SessionKind.objects.create(name="rbac-jupyter", type=SessionKind.Type.JUPYTER)
    resource = ComputeResource.objects.get(name="pretraining/h100-8")
    return sessions.start(user=user, compute_resource=resource, session_kind=kind).pk


def _webhook(slug: str) -> int:
    from apps.webhooks.models import Webhook

    return Webhook.objects.create(group=Group.objects.get(slug=slug), url="https://hooks.example.com/w").pk


def _notification(user: User) -> int:
    return Notification.objects.create(user=user, kind=Notification.Kind.PREEMPTED, message="hi").pk


def requests(ids: dict, role: str | None):
    """(method, url, body, rule) of each matrix entry, for ``role``."""
    mine = {"my_notification": 0, "my_token": 0}
    if role:
        user = User.objects.get(username=role)
        mine = {
            "my_notification": _notification(user),
            "my_token": accounts.create_api_token(user=user, name="mine")[0].pk,
        }
    filled = ids | mine
    for key, rule in MATRIX.items():
        method, template = key.split(" ", 1)
        body = {name: value.format(**filled) for name, value in rule.data.items() if name != "split"}
        if "split" in rule.data:
            body |= _split_data(rule.data["split"])
        yield method, template.format(**filled), body, rule


def answer(client, method: str, url: str, body: dict) -> int:
    """The status of one request, whose changes are rolled back."""
    with transaction.atomic():
        response = client.post(url, body) if method == "POST" else client.get(url)
        transaction.set_rollback(True)
    return response.status_code


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_the_allowed_or_the_refused_answer_on_every_url(login, ids, role):
    client = login(role)
    answers, expected = {}, {}
    for method, url, body, rule in requests(ids, role):
        answers[f"{method} {url}"] = answer(client, method, url, body)
        expected[f"{method} {url}"] = rule.ok if role in rule.allowed else rule.refused
    wrong = {
        key: f"{answers[key]}, expected {expected[key]}" for key in answers if answers[key] != expected[key]
    }
    assert wrong == {}


def test_every_url_sends_an_anonymous_visitor_to_the_login_page(login, ids):
    client = login(None)
    for method, url, body, _ in requests(ids, None):
        response = client.post(url, body) if method == "POST" else client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url


def _url_names(patterns, namespace: str | None = None):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _url_names(pattern.url_patterns, pattern.namespace or namespace)
        elif isinstance(pattern, URLPattern) and namespace in NAMESPACES:
            yield f"{namespace}:{pattern.name}"


def test_the_matrix_covers_every_url_of_the_portal(ids):
    every = set(_url_names(get_resolver().url_patterns))
    assert {"portal:home", "ledger:report", "pricing:delete", "accounts:revoke-token"} <= every
    covered = {resolve(url.split("?")[0]).view_name for _, url, _, _ in requests(ids, "it")}
    assert every - covered == set(), "URLs missing from the RBAC matrix"


def test_an_unknown_group_is_a_404_not_a_500(login):
    client = login("it")
    assert client.get("/departments/nowhere/").status_code == 404
    assert client.get("/teams/nowhere/").status_code == 404


def test_a_refused_page_and_its_export_hold_nothing_of_what_they_refuse(login, estate):
    task = submit("dev-alignment", "alignment/a100-1", name="secret-alignment-run")
    client = login("dev-pretraining")
    for url in (
        "/teams/alignment/",
        "/teams/alignment/?export=csv&table=members",
        f"/work/tasks/{task.pk}/",
        f"/work/tasks/{task.pk}/?export=csv&table=events",
    ):
        response = client.get(url)
        page = response.content.decode()
        assert response.status_code == 403, url
        assert not {"secret-alignment-run", "dev-alignment", "rlhf", "Ali Amari"} & set(page.split()), url
        assert "secret-alignment-run" not in page and "rlhf" not in page, url
