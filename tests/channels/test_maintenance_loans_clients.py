"""Issue 35 rules 3 (maintenance windows) and 4 (dated quota loans) through the clients against a
live server: ``klique maintenance list|schedule|end`` and ``klique loans list|lend|give-back|ask``
(a refused write exits as any 403 or 400 does), the SDK's methods and the MCP read tools."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.models import Group, Membership
from apps.governance.models import ChangeRequest
from apps.policies.models import QuotaLoan, ResourcePolicy
from apps.pools.models import MaintenanceWindow
from klique.client import Client, InvalidRequest, PermissionDenied
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.channels.test_mcp import body, talk
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def department_head():
    research = Group.objects.get(slug="research")
    return MembershipFactory(
        group=research, role=Membership.Role.DEPARTMENT_HEAD, user=UserFactory(username="dora")
    ).user


def test_maintenance_cli_a_user_lists_windows_it_schedules_and_ends_them_a_user_is_refused(
    live_server, estate, tmp_path
):
    it = logged_in(tmp_path / "it", live_server.url, token_for(estate.it))
    user = logged_in(tmp_path / "user", live_server.url, token_for(estate.member))
    made = klique(
        it, "maintenance", "schedule", "onprem", "--start", "1h", "--end", "3h", "--note", "drivers"
    )
    assert made.returncode == 0, made.stderr
    window = MaintenanceWindow.objects.get()
    assert made.stdout.startswith(f"Maintenance window {window.id}: pool onprem from ")
    assert window.ends_at - window.starts_at == timedelta(hours=2) and window.note == "drivers"

    listed = klique(user, "maintenance", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["ID", "POOL", "FROM", "TO", "STATE", "NOTE"]
    assert listed.stdout.splitlines()[1].split()[:2] == [str(window.id), "onprem"]
    assert "scheduled  drivers" in listed.stdout
    rows = json.loads(klique(user, "maintenance", "list", "--json").stdout)
    assert [(r["pool"], r["in_force"]) for r in rows] == [("onprem", False)]

    refused = klique(user, "maintenance", "schedule", "onprem", "--start", "4h", "--end", "5h")
    assert refused.returncode == 4 and "Only IT schedules maintenance windows." in refused.stderr
    backwards = klique(it, "maintenance", "schedule", "onprem", "--start", "9h", "--end", "8h")
    assert backwards.returncode == 5 and "ends_at:" in backwards.stderr
    assert klique(it, "maintenance", "schedule", "onprem", "--start", "soon", "--end", "8h").returncode == 2

    ended = klique(it, "maintenance", "end", str(window.id))
    assert ended.returncode == 0, ended.stderr
    window.refresh_from_db()
    assert window.ended_at is not None
    assert klique(user, "maintenance", "list").stdout.strip() == "No maintenance windows."
    history = json.loads(klique(it, "maintenance", "list", "--all", "--json").stdout)
    assert [r["id"] for r in history] == [window.id]


def test_loans_cli_a_department_head_lends_a_team_lead_is_refused_asks_and_the_loan_is_given_back(
    live_server, estate, tmp_path
):
    head = logged_in(tmp_path / "head", live_server.url, token_for(department_head()))
    lead = logged_in(tmp_path / "lead", live_server.url, token_for(estate.lead))
    lend = ["loans", "lend", "--lender", "vision", "--borrower", "speech", "--what", "reservation"]
    made = klique(head, *lend, "--amount", "1", "--until", "7d", "--note", "paper deadline")
    assert made.returncode == 0, made.stderr
    loan = QuotaLoan.objects.get()
    assert made.stdout.startswith(f"Loan {loan.id}: 1 GPUs of reservation from vision to speech until ")
    speech = ResourcePolicy.objects.get(group__slug="speech")
    assert speech.reservation == 3 and loan.via == QuotaLoan.Via.API

    refused = klique(lead, *lend, "--amount", "1", "--until", "7d")
    assert refused.returncode == 4 and refused.stderr.startswith("klique: ")
    too_much = klique(head, *lend, "--amount", "-1", "--until", "7d")
    assert too_much.returncode == 5 and "amount:" in too_much.stderr

    asked = klique(
        lead,
        *("loans", "ask", "--group", "speech", "--lender", "vision", "--what", "limit", "--amount", "1"),
        *("--until", f"{timezone.now() + timedelta(days=2):%Y-%m-%dT%H:%M}", "--justification", "Friday."),
    )
    assert asked.returncode == 0, asked.stderr
    request = ChangeRequest.objects.get()
    assert asked.stdout.strip() == (
        f"Change request {request.id} is pending: the department head of research decides it."
    )
    assert (request.kind, request.lender.slug, request.limit) == ("loan", "vision", Decimal("1"))
    assert (
        request.loan_until.strftime("%Y-%m-%dT%H:%M")
        == f"{timezone.now() + timedelta(days=2):%Y-%m-%dT%H:%M}"
    )

    seen = json.loads(klique(lead, "loans", "list", "--state", "active", "--json").stdout)
    assert [(r["id"], r["text"], r["note"]) for r in seen] == [
        (loan.id, "1 GPUs of reservation", "paper deadline")
    ]
    assert "1 GPUs of reservation" in klique(lead, "loans", "list").stdout
    assert klique(lead, "loans", "give-back", str(loan.id)).returncode == 4
    back = klique(head, "loans", "give-back", str(loan.id))
    assert (
        back.returncode == 0
        and back.stdout.strip() == f"Loan {loan.id} (1 GPUs of reservation) is given back to vision."
    )
    speech.refresh_from_db()
    assert speech.reservation == 2
    assert klique(lead, "loans", "list", "--state", "active").stdout.strip() == "No loans."


def test_maintenance_and_loans_sdk(live_server, estate):
    with (
        Client(live_server.url, token_for(estate.it)) as it,
        Client(live_server.url, token_for(estate.member)) as user,
    ):
        window = it.schedule_maintenance("onprem", timedelta(hours=1), timedelta(hours=2), note="kernel")
        moved = it.change_maintenance(window.id, ends_at=timedelta(hours=3))
        assert moved.ends_at - moved.starts_at > timedelta(hours=1, minutes=59)
        assert [(w.id, w.pool, w.note) for w in user.maintenance()] == [(window.id, "onprem", "kernel")]
        with pytest.raises(PermissionDenied):
            user.schedule_maintenance("onprem", timedelta(hours=5), timedelta(hours=6))
        assert it.end_maintenance(window.id).ended_at is not None
        assert user.maintenance() == [] and len(it.maintenance(history=True)) == 1

    with (
        Client(live_server.url, token_for(department_head())) as head,
        Client(live_server.url, token_for(estate.lead)) as lead,
    ):
        loan = head.lend("vision", "speech", "limit", Decimal("2"), timedelta(days=3), note="launch")
        assert (loan.text, loan.state, loan.amount) == ("2 GPUs of limit", "active", Decimal("2"))
        assert [x.id for x in lead.loans("active")] == [loan.id] and lead.loan(loan.id).note == "launch"
        with pytest.raises(PermissionDenied):
            lead.lend("vision", "speech", "limit", 1, timedelta(days=1))
        with pytest.raises(InvalidRequest) as refused:
            head.lend("vision", "speech", "limit", 1, timedelta(days=-1))
        assert list(refused.value.errors) == ["until"]
        request = lead.ask_loan("speech", "vision", "reservation", 1, timedelta(days=1), "Deadline.")
        assert (request.state, request.kind, request.reservation) == ("pending", "loan", Decimal("1"))
        assert head.give_back(loan.id).state == "ended" and lead.loans("active") == []


def test_maintenance_and_loans_the_mcp_read_tools_list_windows_and_loans(live_server, estate):
    with Client(live_server.url, token_for(estate.it)) as it:
        window = it.schedule_maintenance("onprem", timedelta(hours=1), timedelta(hours=2))
    with Client(live_server.url, token_for(department_head())) as head:
        loan = head.lend("vision", "speech", "reservation", 1, timedelta(days=1))

    async def calls(client):
        tools = {t.name for t in (await client.list_tools()).tools}
        windows = await client.call_tool("list_maintenance_windows", {})
        loans = await client.call_tool("list_loans", {"state": "active"})
        return tools, body(windows), body(loans)

    tools, windows, loans = talk(live_server, token_for(estate.lead), calls)
    assert {"list_maintenance_windows", "list_loans"} <= tools
    assert [w["id"] for w in windows["maintenance_windows"]] == [window.id]
    assert [(x["id"], x["text"]) for x in loans["loans"]] == [(loan.id, "1 GPUs of reservation")]
