"""``manage.py engine`` (docs/operations.md, "Upgrade"): the engine switch from the shell. Disabled,
passes are skipped and the time is a disabled window; ``--disable`` returns only once no pass
holds the pass lock."""

import io

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from apps.engine import services
from apps.engine.lock import PASS_LOCK_KEY
from apps.engine.models import DisabledWindow


def engine(*args: str) -> str:
    out = io.StringIO()
    call_command("engine", *args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.django_db
def test_disable_and_enable_from_the_shell():
    assert engine() == "engine enabled"
    said = engine("--disable")
    assert said.startswith("engine disabled since ") and said.endswith(" UTC")
    assert services.run_pass().skip_reason == "disabled"
    assert DisabledWindow.objects.get().end is None
    assert engine("--disable").startswith("engine disabled since ")  # again: nothing changes
    assert DisabledWindow.objects.count() == 1
    assert engine("--enable").startswith("engine enabled since ")
    assert DisabledWindow.objects.get().end is not None
    assert not services.run_pass().skipped
    with pytest.raises(CommandError):
        call_command("engine", "--disable", "--enable")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_disable_waits_for_a_pass_in_flight():
    settings = connection.settings_dict
    dsn = f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} dbname={settings['NAME']}"
    with psycopg.connect(f"{dsn} user={settings['USER'] or 'postgres'}", autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [PASS_LOCK_KEY])  # a pass elsewhere, still running
        with pytest.raises(CommandError, match="engine disabled, but a pass was still running after 0.5 s"):
            call_command("engine", "--disable", "--wait", "0.5", stdout=io.StringIO())
        other.execute("SELECT pg_advisory_unlock(%s)", [PASS_LOCK_KEY])
    assert not services.engine_enabled()
    assert engine("--disable", "--wait", "5").startswith("engine disabled since ")
