"""Each validation rule of profiles, resource policies and compute resources, with its message."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.policies import services
from tests.factories import GroupFactory, PolicyFactory, ProfileFactory

pytestmark = pytest.mark.django_db


def errors_of(call) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        call()
    return caught.value.message_dict


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        ("0.2505", "at most 3 decimals"),
        ("1.5", "must be a whole number of GPUs"),
        ("-1", "cannot be negative"),
    ],
)
def test_profile_gpu_size_is_a_fraction_below_one_or_whole(gpus, message):
    errors = errors_of(lambda: services.create_profile(name="p", gpus=Decimal(gpus)))
    assert any(message in m for m in errors["gpus"])


@pytest.mark.parametrize("gpus", ["0", "0.25", "0.125", "1", "8"])
def test_profile_gpu_size_accepts_fractions_whole_gpus_and_cpu_only(gpus):
    assert services.create_profile(name=f"p{gpus}", gpus=Decimal(gpus)).gpus == Decimal(gpus)


def test_profile_time_weight_is_not_negative():
    errors = errors_of(lambda: services.create_profile(name="p", gpus=1, time_weight=Decimal("-0.5")))
    assert any("0 or more" in m for m in errors["time_weight"])


def test_policy_limit_is_at_least_the_reservation():
    errors = errors_of(lambda: services.create_policy(group=GroupFactory(), reservation=8, limit=4))
    assert errors["limit"] == ["Limit (4) must be at least the reservation (8)."]


def test_policy_reservation_is_not_negative():
    errors = errors_of(lambda: services.create_policy(group=GroupFactory(), reservation=-1, limit=4))
    assert any("cannot be negative" in m for m in errors["reservation"])


def test_policy_budget_needs_a_period_and_a_period_needs_hours():
    errors = errors_of(
        lambda: services.create_policy(group=GroupFactory(), reservation=1, limit=2, budget_hours=10)
    )
    assert "budget_period" in errors
    errors = errors_of(
        lambda: services.create_policy(group=GroupFactory(), reservation=1, limit=2, budget_period="week")
    )
    assert "budget_hours" in errors


def tree():
    department = GroupFactory(kind="department")
    team_a = GroupFactory(parent=department)
    team_b = GroupFactory(parent=department)
    parent = services.create_policy(
        group=department, reservation=10, limit=20, budget_hours=100, budget_period="month"
    )
    child = services.create_policy(
        group=team_a, reservation=6, limit=20, budget_hours=60, budget_period="month"
    )
    return parent, child, team_b


def test_child_policy_limit_cannot_exceed_its_parents():
    parent, _, team_b = tree()
    errors = errors_of(lambda: services.create_policy(group=team_b, reservation=1, limit=21))
    assert errors["limit"] == [f"Limit (21) cannot exceed the limit of the parent {parent} (20)."]


def test_parent_limit_cannot_drop_below_a_childs():
    parent, child, _ = tree()
    errors = errors_of(lambda: services.update_policy(parent, limit=Decimal("15")))
    assert errors["limit"] == [f"Limit (15) is below the limit of the child {child} (20)."]


def test_children_reservations_fit_in_the_parents_reservation():
    parent, _, team_b = tree()
    errors = errors_of(lambda: services.create_policy(group=team_b, reservation=5, limit=10))
    assert errors["reservation"] == [
        f"Reservation (5) brings the reservations under {parent} to 11, above its reservation (10)."
    ]
    services.create_policy(group=team_b, reservation=4, limit=10)
    errors = errors_of(lambda: services.update_policy(parent, reservation=Decimal("9")))
    assert errors["reservation"] == [
        "Reservation (9) is below the sum of the reservations of its children (10)."
    ]


def test_children_budgets_fit_in_the_parents_budget():
    parent, _, team_b = tree()
    errors = errors_of(
        lambda: services.create_policy(
            group=team_b, reservation=1, limit=10, budget_hours=50, budget_period="month"
        )
    )
    assert errors["budget_hours"] == [
        f"Time budget (50 h) brings the budgets under {parent} to 110 h, above its budget (100 h)."
    ]
    errors = errors_of(
        lambda: services.create_policy(
            group=team_b, reservation=1, limit=10, budget_hours=5, budget_period="week"
        )
    )
    assert errors["budget_period"] == [f"Budget period must match the parent {parent} (month)."]


def test_a_policy_created_above_existing_ones_becomes_their_parent():
    department = GroupFactory(kind="department")
    team = GroupFactory(parent=department)
    services.create_policy(group=team, reservation=6, limit=12)
    errors = errors_of(lambda: services.create_policy(group=department, reservation=4, limit=12))
    assert any("sum of the reservations of its children (6)" in m for m in errors["reservation"])


def test_a_profile_larger_than_the_limit_cannot_be_connected():
    policy = PolicyFactory(reservation=2, limit=4)
    profile = ProfileFactory(name="h100-8", gpus=8)
    errors = errors_of(lambda: services.connect(policy=policy, profile=profile))
    assert errors["profile"] == [
        f"Profile h100-8 (8 GPUs) is larger than the limit of {policy} (4 GPUs), "
        "so it cannot be connected to that policy."
    ]


def test_a_connected_profile_bounds_the_limit_and_the_limit_bounds_the_profile():
    policy = PolicyFactory(reservation=2, limit=8)
    profile = ProfileFactory(name="h100-8", gpus=8)
    resource = services.connect(policy=policy, profile=profile)
    errors = errors_of(lambda: services.update_policy(policy, limit=Decimal("4")))
    assert any(f"connected by compute resource {resource.name}" in m for m in errors["limit"])
    errors = errors_of(lambda: services.update_profile(profile, gpus=Decimal("16")))
    assert any("is larger than the limit (8)" in m for m in errors["gpus"])


def test_connect_puts_the_policy_last_in_the_profiles_queuing_order():
    profile = ProfileFactory()
    first = services.connect(policy=PolicyFactory(), profile=profile)
    second = services.connect(policy=PolicyFactory(), profile=profile)
    assert (first.queuing_rank, second.queuing_rank) == (0, 1)
