"""A submitted task's priority (``resolve_priority``): the default of the compute resource, else its
profile; a whole number or a priority class's name in any case; the maximum of the compute
resource, else its profile, else none; refusals on the field ``priority``."""

import pytest
from django.core.exceptions import ValidationError

from apps.policies.models import PriorityClass
from apps.tasks import services
from apps.tasks.models import TaskEvent
from apps.tasks.services.priority import PRIORITY_MAX, resolve_priority
from tests.factories import ComputeResourceFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def classes():
    """IT's classes (the data migration's; made again where a transactional test flushed them)."""
    for name, value in (("low", 0), ("normal", 100), ("high", 200)):
        PriorityClass.objects.update_or_create(name=name, defaults={"value": value})


def resource(**fields):
    profile = ProfileFactory(
        default_priority=fields.pop("profile_default", 0), max_priority=fields.pop("profile_max", None)
    )
    return ComputeResourceFactory(profile=profile, **fields)


def refusal(compute_resource, asked) -> str:
    with pytest.raises(ValidationError) as caught:
        resolve_priority(compute_resource, asked)
    assert list(caught.value.message_dict) == ["priority"]
    return caught.value.message_dict["priority"][0]


def test_asking_for_none_takes_the_resources_default_else_the_profiles():
    assert resolve_priority(resource(profile_default=50), None) == 50
    assert resolve_priority(resource(profile_default=50, default_priority=150), None) == 150
    assert resolve_priority(resource(profile_default=50, default_priority=0), None) == 0


def test_the_default_is_not_capped_by_the_maximum():
    assert resolve_priority(resource(default_priority=300, max_priority=100), None) == 300


def test_a_whole_number_is_taken_as_given_negative_included():
    assert resolve_priority(resource(), 120) == 120
    assert resolve_priority(resource(), -5) == -5


def test_a_class_name_in_any_case_takes_its_value(classes):
    assert resolve_priority(resource(), "high") == 200
    assert resolve_priority(resource(), " Normal ") == 100
    assert resolve_priority(resource(), "LOW") == 0


def test_above_the_resources_maximum_is_refused_naming_it_and_its_class(classes):
    capped = resource(name="vision/a100", profile_max=500, max_priority=100)
    assert resolve_priority(capped, 100) == 100
    assert resolve_priority(capped, "normal") == 100
    assert (
        refusal(capped, "high") == "Priority 200 is above the maximum: at most 100 (normal) on vision/a100."
    )
    assert refusal(capped, 101) == "Priority 101 is above the maximum: at most 100 (normal) on vision/a100."


def test_without_a_resource_maximum_the_profiles_applies_and_without_either_none(classes):
    assert refusal(resource(name="r", profile_max=150), 151) == (
        "Priority 151 is above the maximum: at most 150 on r."
    )
    assert resolve_priority(resource(), PRIORITY_MAX) == PRIORITY_MAX


def test_an_unknown_class_is_refused_naming_the_known_ones(classes):
    assert refusal(resource(), "urgent") == (
        "Unknown priority class 'urgent'; the classes are low (0), normal (100), high (200), "
        "or give a whole number."
    )


@pytest.mark.parametrize("asked", [True, False, 1.0, 1.5, [1], {"value": 1}])
def test_booleans_floats_and_other_shapes_are_refused(asked):
    assert refusal(resource(), asked) == "Give a whole number or the name of a priority class."


@pytest.mark.parametrize("asked", [PRIORITY_MAX + 1, -(2**31) - 1])
def test_a_number_the_database_cannot_store_is_refused(asked):
    assert "from -2147483648 to 2147483647" in refusal(resource(), asked)


def test_submit_stores_the_resolved_priority_and_records_it_on_the_submitted_event(classes):
    target = resource(default_priority=20)
    target.profile.pools.add(PoolFactory(capacity=8))
    user = UserFactory()
    asked = services.submit(user=user, compute_resource=target, command="x", priority="High")
    default = services.submit(user=user, compute_resource=target, command="x")
    assert (asked.priority, default.priority) == (200, 20)
    asked.refresh_from_db()
    assert asked.priority == 200
    assert TaskEvent.objects.get(task=asked).detail["priority"] == 200


def test_bulk_submit_resolves_each_item_and_refuses_all_when_one_is_above_the_maximum(classes):
    target = resource(max_priority=100)
    target.profile.pools.add(PoolFactory(capacity=8))
    user = UserFactory()
    tasks = services.submit_many(
        user=user,
        items=[
            {"compute_resource": target, "command": "a", "priority": "low"},
            {"compute_resource": target, "command": "b"},
        ],
    )
    assert [t.priority for t in tasks] == [0, 0]
    with pytest.raises(services.SubmissionsRefused) as caught:
        services.submit_many(
            user=user,
            items=[
                {"compute_resource": target, "command": "a", "priority": 50},
                {"compute_resource": target, "command": "b", "priority": "high"},
            ],
        )
    assert list(caught.value.errors) == [1] and "at most 100" in caught.value.errors[1]["priority"][0]
