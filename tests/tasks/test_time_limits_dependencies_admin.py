"""Rules 1, 2 and 5 in IT's task admin: a submitted task shows its time limit, running time,
dependency count and array read-only, with the tasks it runs after and those that run after it as
read-only inlines; the add form takes a time limit, checked as every channel checks it."""

import pytest
from django.urls import reverse

from apps.tasks import services
from apps.tasks.models import Task
from tests.factories import (
    ComputeResourceFactory,
    GroupFactory,
    MembershipFactory,
    PolicyFactory,
    PoolFactory,
    ProfileFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(client):
    group = GroupFactory(slug="vision")
    profile = ProfileFactory(name="a100", gpus=1, default_time_limit_s=3600, max_time_limit_s=7200)
    profile.pools.add(PoolFactory(name="onprem"))
    resource = ComputeResourceFactory(name="vision/a100", profile=profile, policy=PolicyFactory(group=group))
    user = MembershipFactory(group=group, user=UserFactory(username="vera")).user
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client, resource, user


def test_time_limits_and_dependencies_the_task_page_shows_them_read_only(setup):
    client, resource, user = setup
    first = services.submit(user=user, compute_resource=resource, command="prep")
    array = services.submit_array(
        user=user, compute_resource=resource, command="train", size=2, after_ok=[first.pk], time_limit_s=600
    )
    page = client.get(reverse("admin:tasks_task_change", args=[array[1].pk])).content.decode()
    assert "Task it runs after" in page and "After it succeeds" in page
    assert 'name="time_limit_s"' not in page  # read-only on a submitted task
    assert "600" in page and "Array index" in page
    upstream = client.get(reverse("admin:tasks_task_change", args=[first.pk])).content.decode()
    assert "Tasks that run after it" in upstream
    assert upstream.count("After it succeeds") == 2


@pytest.mark.parametrize(("typed", "got"), [("", 3600), ("1800", 1800)])
def test_time_limits_the_add_form_takes_a_limit_or_the_default(setup, typed, got):
    client, resource, user = setup
    form = {
        "user": user.pk,
        "compute_resource": resource.pk,
        "command": "train",
        "spec": "{}",
        "channel": "admin",
        "time_limit_s": typed,
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
    }
    answer = client.post(reverse("admin:tasks_task_add"), form)
    assert answer.status_code == 302, answer.context["adminform"].form.errors
    assert Task.objects.get().time_limit_s == got


def test_time_limits_the_add_form_refuses_a_limit_above_the_maximum(setup):
    client, resource, user = setup
    form = {
        "user": user.pk,
        "compute_resource": resource.pk,
        "command": "train",
        "spec": "{}",
        "channel": "admin",
        "time_limit_s": "9000",
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
    }
    answer = client.post(reverse("admin:tasks_task_add"), form)
    assert answer.status_code == 200
    errors = answer.context["adminform"].form.errors
    assert "is above the maximum on vision/a100" in errors["time_limit_s"][0]
    assert not Task.objects.exists()
