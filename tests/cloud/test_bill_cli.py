"""``klique bill reconcile --month``: the month's reconciliation per pool on the command line, as
a table and as JSON, against a live server; others than finance and IT at the root exit 4."""

import io
import json
from datetime import date

import pytest

from apps.accounts.models import User
from apps.cloud import bills
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.cloud.bill_files import month_rows
from tests.cloud.bill_pool import aws_month  # noqa: F401  (the fixture)
from tests.portal.conftest import estate  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("aws_month")]


def test_finance_reads_the_reconciliation_on_the_command_line(live_server, tmp_path):
    name, content = month_rows().file("csv")
    stream = io.BytesIO(content)
    stream.name = name
    bills.import_bill(stream, date(2026, 11, 1))
    env = logged_in(tmp_path / "finance", live_server.url, token_for(User.objects.get(username="finance")))
    shown = klique(env, "bill", "reconcile", "--month", "2026-11")
    assert shown.returncode == 0, shown.stderr
    assert "aws-h100" in shown.stdout and "$71.55" in shown.stdout and "-$55.04" in shown.stdout
    found = json.loads(klique(env, "bill", "reconcile", "--month", "2026-11", "--json").stdout)
    assert found["pools"][0]["difference"] == "71.55"
    assert klique(env, "bill", "reconcile", "--month", "2026-13").returncode == 2
    member = logged_in(
        tmp_path / "dev", live_server.url, token_for(User.objects.get(username="dev-pretraining"))
    )
    assert klique(member, "bill", "reconcile", "--month", "2026-11").returncode == 4


def test_finance_imports_the_bill_on_the_command_line_and_bad_input_is_refused(live_server, tmp_path):
    name, content = month_rows().file("parquet")
    path = tmp_path / name
    path.write_bytes(content)
    env = logged_in(tmp_path / "finance", live_server.url, token_for(User.objects.get(username="finance")))
    shown = klique(env, "bill", "import", str(path), "--month", "2026-11")
    assert shown.returncode == 0, shown.stderr
    assert f"Imported {name} as the cloud bill of 2026-11" in shown.stdout
    assert "in USD" in shown.stdout and "klique bill reconcile --month 2026-11" in shown.stdout
    found = json.loads(klique(env, "bill", "reconcile", "--month", "2026-11", "--json").stdout)
    assert found["pools"][0]["difference"] == "71.55"
    assert klique(env, "bill", "import", str(tmp_path / "none.csv"), "--month", "2026-11").returncode == 2
    assert klique(env, "bill", "import", str(path), "--month", "11-2026").returncode == 2
    empty = klique(env, "bill", "import", str(path), "--month", "2026-09")
    assert empty.returncode != 0 and "No EC2 instance usage of September 2026" in empty.stderr
    member = logged_in(
        tmp_path / "dev", live_server.url, token_for(User.objects.get(username="dev-pretraining"))
    )
    assert klique(member, "bill", "import", str(path), "--month", "2026-11").returncode == 4
