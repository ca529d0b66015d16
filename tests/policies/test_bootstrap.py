"""``manage.py bootstrap`` (docs/deploy.md, "The first admin and the estate"): the first IT admin and
the estate of deploy/estate.example.yaml, idempotent, and a refused field writes nothing."""

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.accounts.models import Group, Membership, User
from apps.policies.models import BudgetWindow, ComputeResource, PolicyChange, Profile, ResourcePolicy
from apps.pools.models import GpuType, Pool, PoolCapacityChange
from klique.settings.base import BASE_DIR

EXAMPLE = BASE_DIR / "deploy/estate.example.yaml"
MODELS = (GpuType, Group, Pool, Profile, ResourcePolicy, BudgetWindow, ComputeResource, User, Membership)

pytestmark = pytest.mark.django_db


def bootstrap(*args) -> str:
    out = io.StringIO()
    call_command("bootstrap", *args, stdout=out)
    return out.getvalue()


def rows() -> dict:
    return {model.__name__: model.objects.count() for model in MODELS}


@pytest.fixture
def password(tmp_path) -> Path:
    path = tmp_path / "password"
    path.write_text("Corr3ct-Horse-Battery\n")
    return path


def admin_args(password: Path) -> list[str]:
    return [
        "--admin-username",
        "it",
        "--admin-email",
        "it@example.org",
        "--admin-password-file",
        str(password),
    ]


def test_the_example_estate_and_the_first_admin(password):
    said = bootstrap("--from", str(EXAMPLE), *admin_args(password))
    assert "pools created: 2" in said and "admin it: created, IT admin of acme" in said
    vision = ResourcePolicy.objects.get(group__slug="vision")
    assert (vision.reservation, vision.limit, vision.budget_hours, vision.budget_period) == (
        16,
        40,
        200,
        "day",
    )
    assert {w.period: w.hours for w in vision.extra_budgets.all()} == {"week": 1000}
    assert sorted(r.profile.name for r in ComputeResource.objects.filter(policy=vision)) == [
        "a100-1gpu",
        "a100-8gpu",
        "small",
    ]
    small = Profile.objects.get(name="small")
    assert [link.pool.name for link in small.pool_links.order_by("pool_rank")] == [
        "baremetal-l40s",
        "onprem-a100",
    ]
    assert Group.objects.get(slug="vision").parent.slug == "research"
    assert Pool.objects.get(name="onprem-a100").country == "NL"
    it = User.objects.get(username="it")
    assert it.check_password("Corr3ct-Horse-Battery") and it.is_staff and not it.is_superuser
    assert it.memberships.get().role == Membership.Role.IT_ADMIN
    assert it.groups.filter(name="IT admins").exists()


def test_a_second_run_changes_nothing_and_keeps_the_admin_password(password, tmp_path):
    bootstrap("--from", str(EXAMPLE), *admin_args(password))
    before = rows()
    password.write_text("An0ther-Passw0rd-Here")
    said = bootstrap("--from", str(EXAMPLE), *admin_args(password))
    assert rows() == before
    assert said.splitlines() == [
        "GPU types unchanged: 2",
        "groups unchanged: 3",
        "pools unchanged: 2",
        "profiles unchanged: 3",
        "policies unchanged: 3",
        "admin it: exists, password unchanged, IT admin of acme",
    ]
    assert User.objects.get(username="it").check_password("Corr3ct-Horse-Battery")
    # a changed file changes the rows it names, through the services (capacity history, audit trail)
    changed = tmp_path / "estate.yaml"
    changed.write_text(
        EXAMPLE.read_text().replace("capacity: 16", "capacity: 24").replace("limit: 40", "limit: 48")
    )
    said = bootstrap("--from", str(changed))
    assert "pools changed: 1" in said and "policies changed: 1" in said
    assert Pool.objects.get(name="baremetal-l40s").capacity == 24
    assert PoolCapacityChange.objects.filter(pool__name="baremetal-l40s", reason="bootstrap").exists()
    assert PolicyChange.objects.get(policy__group__slug="vision").changes["limit"] == ["40.000", "48.000"]


@pytest.mark.parametrize(
    "change, error",
    [
        (
            ("capacity: 16", "capacity: lots"),
            "pools[1] 'baremetal-l40s': capacity: “lots” value must be a decimal",
        ),
        (("kind: team", "kind: teem"), "groups[2] 'vision': kind: Value 'teem' is not a valid choice."),
        (
            ("    time_weight: 0.5", "    time_weight: 0.5\n    colour: red"),
            "profiles[2] 'small': colour: not a field",
        ),
        (
            ("pools: [onprem-a100]   # in", "pools: [nowhere]   # in"),
            "profiles[0] 'a100-1gpu': pools: no pool named",
        ),
        (("reservation: 16", "reservation: 90"), "policies[2] 'vision': limit: Limit (48) must be at least"),
    ],
    ids=["decimal", "choice", "unknown-field", "unknown-pool", "rule"],
)
def test_a_refused_field_names_the_item_and_writes_nothing(password, tmp_path, change, error):
    bad = tmp_path / "estate.yaml"
    # limit 48 too: rows changed before the refused item must be rolled back as well
    bad.write_text(EXAMPLE.read_text().replace("limit: 40", "limit: 48").replace(*change))
    with pytest.raises(CommandError) as refused:
        bootstrap("--from", str(bad), *admin_args(password))
    assert str(refused.value).startswith(f"{bad}: {error}")
    assert str(refused.value).endswith("(nothing was written)")
    assert set(rows().values()) == {0}


def test_a_refused_change_on_a_second_run_keeps_the_first(password, tmp_path):
    bootstrap("--from", str(EXAMPLE), *admin_args(password))
    before = rows()
    bad = tmp_path / "estate.yaml"
    bad.write_text(EXAMPLE.read_text().replace("capacity: 64", "capacity: 70").replace("gpus: 8", "gpus: -8"))
    with pytest.raises(CommandError, match=r"profiles\[1\] 'a100-8gpu': gpus: "):
        bootstrap("--from", str(bad))
    assert rows() == before and Pool.objects.get(name="onprem-a100").capacity == 64


def test_a_weak_password_and_nothing_to_do_are_refused(tmp_path):
    weak = tmp_path / "weak"
    weak.write_text("it")
    with pytest.raises(CommandError, match="admin password: "):
        bootstrap("--from", str(EXAMPLE), "--admin-username", "it", "--admin-password-file", str(weak))
    assert set(rows().values()) == {0}
    with pytest.raises(CommandError, match="nothing to do"):
        bootstrap()
