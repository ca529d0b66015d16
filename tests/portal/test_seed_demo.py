"""``seed_demo`` loads a believable estate and running it again changes nothing."""

import os
import re
import subprocess
import sys
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from apps.accounts.models import Group, Membership, User
from apps.policies.models import ComputeResource, Profile, ResourcePolicy
from apps.pools.models import Pool
from apps.portal import demo
from apps.pricing.models import Price
from klique.settings.base import BASE_DIR

pytestmark = pytest.mark.django_db

MODELS = [Group, Membership, User, Pool, Profile, ResourcePolicy, ComputeResource, Price]


def counts():
    return {model.__name__: model.objects.count() for model in MODELS}


def test_seed_demo_is_idempotent(capsys):
    call_command("seed_demo")
    first = counts()
    call_command("seed_demo")
    assert counts() == first
    assert "created now: 0 groups, 0 pools" in capsys.readouterr().out


def test_demo_estate_has_the_shape_of_the_issue():
    demo.seed()
    kinds = {kind: Group.objects.filter(kind=kind).count() for kind in Group.Kind.values}
    assert (kinds["organisation"], kinds["business_unit"], kinds["department"], kinds["team"]) == (1, 2, 4, 8)
    assert {r.value for r in Membership.Role} <= set(Membership.objects.values_list("role", flat=True))
    quarter = Profile.objects.get(name="a100-quarter")
    assert str(quarter.gpus) == "0.250"
    assert Profile.objects.get(name="h100-8").time_weight == 2
    assert Profile.objects.get(name="cpu-only").time_weight == 0
    assert Pool.objects.get(name="hpc-slurm").capacity == 128


def test_every_demo_object_passes_validation():
    demo.seed()
    for model in (Group, Pool, Profile, ResourcePolicy, ComputeResource, Price):
        for obj in model.objects.all():
            obj.full_clean()


def test_demo_users_log_in_with_the_printed_password(client, capsys):
    call_command("seed_demo")
    assert demo.demo_password() in capsys.readouterr().out
    assert client.login(username="finance", password=demo.demo_password())
    assert User.objects.get(username="it").is_staff
    assert not User.objects.get(username="dev-pretraining").is_staff


# Production (issue 11, defect 7): the demo's users must not appear with the published password.
def test_seed_demo_refuses_to_run_under_production_settings(tmp_path):
    environment = {
        k: v for k, v in os.environ.items() if k not in {"DEBUG", "REDIS_URL", "KLIQUE_DEMO_PASSWORD"}
    } | {
        "DJANGO_SETTINGS_MODULE": "klique.settings.production",
        "SECRET_KEY": "p" * 50,
        "ALLOWED_HOSTS": "klique.example.org",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-used.sqlite3'}",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "seed_demo"],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "seed_demo refuses to run under production settings" in done.stderr
    assert "--allow-production" in done.stderr
    assert demo.DEFAULT_DEMO_PASSWORD not in done.stdout + done.stderr


@override_settings(KLIQUE_ENV="production")
def test_seed_demo_allowed_in_production_uses_a_generated_password_printed_once(client, capsys):
    call_command("seed_demo", allow_production=True)
    out = capsys.readouterr().out
    password = re.search(r"shown this once: (\S+)\):", out).group(1)
    assert password != demo.demo_password() and len(password) >= 20
    assert client.login(username="it", password=password)
    assert not client.login(username="it", password=demo.demo_password())
    call_command("seed_demo", allow_production=True)
    assert password not in capsys.readouterr().out  # printed once: the users exist now


def test_the_demo_offers_a_jupyter_session_kind_with_idle_limits_on_its_sessions_profile():
    from apps.portal.demo import SESSION_LIMITS
    from apps.sessions.models import ProfileIdleLimits, SessionKind

    call_command("seed_demo", verbosity=0)
    call_command("seed_demo", verbosity=0)
    assert list(SessionKind.objects.values_list("name", "type")) == [
        ("Desktop", "port"),
        ("JupyterLab", "jupyter"),
        ("JupyterLab editor (IDE)", "jupyter"),
    ]
    limits = ProfileIdleLimits.objects.get(profile__name="a100-quarter")
    assert {field: getattr(limits, field) for field in SESSION_LIMITS} == SESSION_LIMITS


def test_seed_demo_brings_last_months_cloud_bill_reconciled_with_one_injected_difference(capsys):
    from apps.cloud import bill_reconcile
    from apps.cloud.models import CloudBill
    from apps.portal import demo_bill

    call_command("seed_demo")
    month = demo_bill.last_month(timezone.now())
    bill = CloudBill.objects.get(month=month)
    assert bill.imported_by.username == "finance"
    found = bill_reconcile.reconcile(month)
    (pool,) = found.pools
    assert (pool.klique, pool.bill, pool.difference) == (
        Decimal("340.00"),
        Decimal("353.60"),
        Decimal("13.60"),
    )
    assert (pool.hours, pool.price, pool.unmatched, pool.missing) == (Decimal("13.60"), 0, 0, 0)
    call_command("seed_demo")
    assert CloudBill.objects.filter(month=month).count() == 1
