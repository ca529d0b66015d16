"""Leadership's cloud spend caps: each cap against the cloud spend of the UTC calendar month, on real
rows (node prices, cloud nodes, the workers they enrolled, the tasks those claimed and their usage
intervals); the organisation's cap counts idle nodes too, a business unit's the spend of its
subtree's groups. Setting and removing caps is validated field by field and audited."""

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts import services as accounts
from apps.accounts.models import Group
from apps.cloud import services as cloud
from apps.cloud.caps import cap_statuses, month_bounds, reached_caps
from apps.cloud.models import CloudNode, CloudPool, CloudSpendCap, CloudSpendCapChange, InstanceType
from apps.policies import services as policies
from apps.pools.models import Worker
from apps.pricing.models import NodePrice
from apps.tasks.models import Task
from tests.factories import ComputeResourceFactory, ProfileFactory, WorkerFactory
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

ON_DEMAND = CloudNode.Market.ON_DEMAND
VIA = CloudSpendCapChange.Via.API
NOW = datetime(2026, 4, 20, 12, tzinfo=UTC)


def at(hour: int, day: int = 1, month: int = 4, year: int = 2026) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


@pytest.fixture
def estate():
    """make_estate's organisation and business unit "research" (departments language and vision),
    plus a second business unit "products" with a team "ranking"."""
    estate = make_estate()
    products = accounts.create_group(
        name="Products", slug="products", kind=Group.Kind.BUSINESS_UNIT, parent=estate.org
    )
    ranking = accounts.create_group(name="Ranking", slug="ranking", kind=Group.Kind.TEAM, parent=products)
    policy = policies.create_policy(group=ranking, reservation=0, limit=16)
    estate.resources["ranking"] = ComputeResourceFactory(
        name="ranking-flex", policy=policy, profile=ProfileFactory(gpus=1, size_from_task=True)
    )
    estate.products, estate.ranking = products, ranking
    return estate


@pytest.fixture
def p5(estate):
    """An 8-GPU instance type of the estate's cloud pool at 10 EUR and 12 USD a node-hour."""
    cloud_pool = CloudPool.objects.create(pool=estate.cloud, provider="local", settings={})
    for currency, amount in (("EUR", "10"), ("USD", "12")):
        NodePrice.objects.create(
            instance_type="p5.48xlarge",
            market=ON_DEMAND,
            currency=currency,
            per_node_hour=Decimal(amount),
            effective_from=date(2026, 1, 1),
        )
    return InstanceType.objects.create(cloud_pool=cloud_pool, name="p5.48xlarge", gpus=8, max_count=8)


def node(instance_type, name: str, launched: datetime, terminated: datetime) -> CloudNode:
    return CloudNode.objects.create(
        cloud_pool=instance_type.cloud_pool,
        instance_type=instance_type,
        market=ON_DEMAND,
        name=name,
        state=CloudNode.State.TERMINATED,
        launched_at=launched,
        terminated_at=terminated,
    )


def work(estate, cloud_node: CloudNode, group: Group, start: datetime, end: datetime) -> None:
    """A task on all 8 GPUs of the node, claimed by the node's worker, with its usage interval."""
    pool = cloud_node.cloud_pool.pool
    worker = Worker.objects.filter(pool=pool, hostname=cloud_node.name).first()
    worker = worker or WorkerFactory(pool=pool, hostname=cloud_node.name)
    user = estate.users["alice"]
    task = Task.objects.create(
        user=user,
        compute_resource=estate.resources[group.slug],
        gpus=Decimal(8),
        command="train",
        pool=pool,
        worker=worker,
    )
    record(estate, group, user, pool, start, end, gpus="8", task=task)


@pytest.fixture
def april(estate, p5):
    """April's cloud spend at 10 EUR a node-hour: 80 EUR in all.

    node 1, 10:00-14:00: pretraining (research) 10-12 = 20, perception (research) 12-13 = 10, idle 13-14 = 10
    node 2, 10:00-12:00: ranking (products) = 20
    node 3, 10:00-12:00: language, a department of research, = 20
    """
    first = node(p5, "burst-1", at(10), at(14))
    work(estate, first, estate.team_a, at(10), at(12))
    work(estate, first, estate.team_c, at(12), at(13))
    second = node(p5, "burst-2", at(10), at(12))
    work(estate, second, estate.ranking, at(10), at(12))
    third = node(p5, "burst-3", at(10), at(12))
    work(estate, third, estate.dept, at(10), at(12))
    return estate


def set_cap(group, amount, currency="EUR", actor=None):
    return cloud.set_cap(group, Decimal(amount), currency, actor=actor, via=VIA)


def by_group(statuses) -> dict[str, tuple[Decimal, bool]]:
    return {status.group: (status.spent, status.reached) for status in statuses}


def test_the_organisations_cap_counts_all_cloud_spend_idle_included(april):
    set_cap(april.org, "80")
    (status,) = cap_statuses(NOW)
    assert (status.scope, status.spent, status.currency) == ("organisation", Decimal("80.00"), "EUR")
    assert status.reached and status.share == 1.0


def test_a_business_units_cap_counts_the_spend_of_every_group_in_its_subtree(april):
    set_cap(april.bu, "100")
    set_cap(april.products, "100")
    statuses = cap_statuses(NOW)
    # research: pretraining 20 + perception 10 + language (a department) 20; not the idle 10.
    assert by_group(statuses) == {
        "Research": (Decimal("50.00"), False),
        "Products": (Decimal("20.00"), False),
    }
    assert {s.scope for s in statuses} == {"business unit"}
    assert [s.share for s in statuses] == [0.2, 0.5]  # Products, then Research: by name


def test_a_cap_is_reached_at_exactly_its_amount_and_not_a_cent_below(april):
    set_cap(april.bu, "50")
    set_cap(april.products, "20.01")
    assert by_group(cap_statuses(NOW)) == {
        "Research": (Decimal("50.00"), True),
        "Products": (Decimal("20.00"), False),
    }
    assert [s.group for s in reached_caps(NOW)] == ["Research"]


def test_the_organisation_comes_first_then_the_business_units_by_name(april):
    set_cap(april.products, "1000")
    set_cap(april.bu, "1000")
    set_cap(april.org, "1000")
    assert [s.group for s in cap_statuses(NOW)] == ["Acme", "Products", "Research"]


def test_the_month_is_the_utc_calendar_month_of_now_and_resets_at_midnight_on_the_first(april, p5):
    node(p5, "march", at(20, day=31, month=3), at(22, day=31, month=3))  # 20 EUR in March
    node(p5, "may", at(0, day=1, month=5), at(3, day=1, month=5))  # 30 EUR in May
    set_cap(april.org, "80")
    (status,) = cap_statuses(at(23, day=30))
    assert (status.period_start, status.resets_at) == (at(0), at(0, month=5))
    assert status.spent == Decimal("80.00") and status.reached
    (may,) = cap_statuses(at(12, day=1, month=5))
    assert (may.period_start, may.resets_at) == (at(0, month=5), at(0, month=6))
    assert may.spent == Decimal("30.00") and not may.reached


def test_now_in_another_time_zone_counts_the_utc_month():
    two_hours_east = timezone(timedelta(hours=2))
    local = datetime(2026, 5, 1, 1, tzinfo=two_hours_east)  # 2026-04-30 23:00 UTC
    assert month_bounds(local) == (at(0), at(0, month=5))
    assert month_bounds(datetime(2026, 12, 31, 23, tzinfo=UTC)) == (
        at(0, month=12),
        datetime(2027, 1, 1, tzinfo=UTC),
    )


def test_a_cap_in_another_currency_counts_spend_at_that_currencys_prices(april):
    set_cap(april.org, "96", currency="usd")
    (status,) = cap_statuses(NOW)
    assert (status.currency, status.spent, status.reached) == ("USD", Decimal("96.00"), True)


def test_the_statuses_take_the_same_queries_however_many_caps(april):
    set_cap(april.org, "1000")
    with CaptureQueriesContext(connection) as one:
        cap_statuses(NOW)
    for index in range(6):
        unit = accounts.create_group(
            name=f"Unit {index}", slug=f"unit-{index}", kind=Group.Kind.BUSINESS_UNIT, parent=april.org
        )
        set_cap(unit, "1000")
    set_cap(april.bu, "1000")
    with CaptureQueriesContext(connection) as eight:
        statuses = cap_statuses(NOW)
    assert len(statuses) == 8
    assert len(eight.captured_queries) == len(one.captured_queries) + 1  # the group tree, read once


def test_no_cap_no_spend_read(estate):
    with CaptureQueriesContext(connection) as queries:
        assert cap_statuses(NOW) == []
    assert len(queries.captured_queries) == 1


def test_setting_changing_and_removing_a_cap_is_audited(estate):
    cio = estate.users["cio"]
    cap = cloud.set_cap(estate.bu, "1000", "eur", actor=cio, via=CloudSpendCapChange.Via.PORTAL)
    assert (cap.amount, cap.currency, cap.set_by) == (Decimal("1000"), "EUR", cio)
    cloud.set_cap(
        estate.bu, Decimal("1500.5"), "EUR", actor=estate.users["it"], via=CloudSpendCapChange.Via.ADMIN
    )
    cloud.set_cap(estate.bu, Decimal("1500.50"), "EUR", actor=cio, via=VIA)  # no change: no record
    cap.refresh_from_db()
    assert (cap.amount, cap.set_by) == (Decimal("1500.5"), estate.users["it"])
    cloud.remove_cap(cap, actor=cio, via=CloudSpendCapChange.Via.PORTAL)
    assert not CloudSpendCap.objects.exists()
    changes = list(CloudSpendCapChange.objects.order_by("at", "pk"))
    assert [(c.action, c.via, c.actor, c.group) for c in changes] == [
        ("set", "portal", cio, estate.bu),
        ("changed", "admin", estate.users["it"], estate.bu),
        ("removed", "portal", cio, estate.bu),
    ]
    assert changes[0].before == {}
    assert changes[0].after == {"group": "Research", "amount": "1000.0000", "currency": "EUR"}
    assert changes[1].before == changes[0].after
    assert changes[1].after == {"group": "Research", "amount": "1500.5000", "currency": "EUR"}
    assert changes[2].before == changes[1].after and changes[2].after == {}
    assert all(c.cap_id is None for c in changes)  # the cap is gone; its record stays readable


def test_one_cap_per_scope_a_second_set_changes_it(estate):
    set_cap(estate.org, "10")
    set_cap(estate.org, "20", currency="USD")
    cap = CloudSpendCap.objects.get()
    assert (cap.amount, cap.currency) == (Decimal("20"), "USD")


@pytest.mark.parametrize(
    ("group", "amount", "currency", "field", "reason"),
    [
        ("team_a", "10", "EUR", "group", "Pretraining is a team: a cloud spend cap is for the organisation"),
        ("dept", "10", "EUR", "group", "Language is a department"),
        (None, "10", "EUR", "group", "Choose the organisation or a business unit."),
        ("org", "0", "EUR", "amount", "must be more than 0"),
        ("org", "-5", "EUR", "amount", "must be more than 0"),
        ("org", "1e3", "EUR", "amount", "Plain decimal notation only"),
        ("org", "1_000", "EUR", "amount", "Plain decimal notation only"),
        ("org", "abc", "EUR", "amount", "Plain decimal notation only"),
        ("org", "0.00001", "EUR", "amount", "At most 4 decimal places."),
        ("org", "100000000", "EUR", "amount", "Less than 100000000."),
        ("org", "10", "EU", "currency", "three-letter ISO 4217 code"),
        ("org", "10", "E1R", "currency", "three-letter ISO 4217 code"),
        ("org", "10", "ÉUR", "currency", "three-letter ISO 4217 code"),
    ],
)
def test_a_refused_cap_names_the_field_and_why_and_changes_nothing(
    estate, group, amount, currency, field, reason
):
    with pytest.raises(ValidationError) as refused:
        cloud.set_cap(getattr(estate, group) if group else None, amount, currency, actor=None, via=VIA)
    assert list(refused.value.message_dict) == [field]
    assert reason in refused.value.message_dict[field][0]
    assert not CloudSpendCap.objects.exists() and not CloudSpendCapChange.objects.exists()


def test_every_refused_field_is_named_at_once(estate):
    with pytest.raises(ValidationError) as refused:
        cloud.set_cap(estate.team_a, "0", "euro", actor=None, via="email")
    assert sorted(refused.value.message_dict) == ["amount", "currency", "group", "via"]


def test_the_model_refuses_a_team_and_a_zero_amount_in_the_admin_too(estate):
    cap = CloudSpendCap(group=estate.team_a, amount=Decimal(0), currency="EUR", updated_at=NOW)
    with pytest.raises(ValidationError) as refused:
        cap.clean()
    assert sorted(refused.value.message_dict) == ["amount", "group"]


def test_a_cap_in_a_currency_without_node_prices_says_what_it_does_not_count(april):
    from apps.portal.tables import cap_status

    set_cap(april.org, "10", "GBP")
    [status] = cap_statuses(NOW)
    assert (status.spent, status.reached, status.unpriced_node_hours) == (Decimal(0), False, Decimal("8.000"))
    assert cap_status(status) == "within cap (8 node-hours without a price in GBP not counted)"


def test_a_change_without_a_channel_is_refused_naming_via(estate):
    with pytest.raises(ValidationError) as refused:
        cloud.set_cap(estate.org, Decimal(10), "EUR", actor=None, via=None)
    assert "via" in refused.value.message_dict
