"""Estate and ledger figures for ``deploy/check-backup.sh``, run through ``manage.py shell``.

``CHECK_BACKUP_STEP=build``: the demo estate (``seed_demo``) with a day of usage on the ledger: work
placed by real engine passes over the last day, stopped hour by hour, a few tasks still running,
and the rollups brought up to date. ``CHECK_BACKUP_STEP=sums``: print, as one JSON object, what
must survive a dump and restore: the usage ledger's totals (GPU-hours, budget hours and cost from
the ledger's report service, as IT sees them, per group and per pool) and the row count of every
table. The figures are read at a fixed moment (``CHECK_BACKUP_AT``) so both reads cover the same time.
"""

import io
import json
import os
from datetime import UTC, datetime, timedelta

from django.apps import apps
from django.core.management import call_command
from django.db import connection

from apps.accounts import services as accounts
from apps.accounts.models import Membership, User
from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.policies.models import ComputeResource
from apps.pricing.models import Price
from apps.tasks import services as lifecycle
from apps.tasks.models import Task

AT = datetime.fromisoformat(os.environ["CHECK_BACKUP_AT"]).astimezone(UTC)
START = AT - timedelta(days=1)


def build() -> None:
    call_command("seed_demo", stdout=io.StringIO())
    person = User.objects.create_user(username="backup-check", email="backup-check@example.test")
    resources = list(ComputeResource.objects.select_related("policy__group").order_by("name"))
    for resource in resources:
        accounts.add_membership(user=person, group=resource.policy.group, role=Membership.Role.MEMBER)
    for hour in range(0, 20, 4):
        at = START + timedelta(hours=hour)
        for resource in resources:
            try:
                lifecycle.submit(user=person, compute_resource=resource, command=f"train --hour {hour}")
            except Exception:  # a resource this person may not use (a session kind, a sovereign profile)
                continue
        engine.run_pass(now=at)
        placed = list(Task.objects.filter(state=Task.State.PLACED).order_by("pk"))
        # stop about half of what is placed an hour and a half later, the rest keeps running
        lifecycle.request_stop_many(placed[::2], Task.StopReason.CANCELED, at + timedelta(minutes=90))
    call_command("rollup_usage", stdout=io.StringIO())
    print(
        f"built: {UsageInterval.objects.count()} usage intervals "
        f"({UsageInterval.objects.filter(end__isnull=True).count()} open), {Price.objects.count()} prices"
    )


def report_sums(dims: tuple[str, ...], viewer: User) -> dict:
    currency = Price.objects.values_list("currency", flat=True).first() or "EUR"
    report = usage_report(viewer, ReportSpec(dims=dims, start=START, end=AT, currency=currency), now=AT)
    rows = {
        " / ".join(str(v) for v in row.labels.values()): [
            str(row.figures.gpu_hours),
            str(row.figures.budget_hours),
            str(row.figures.cost_amount),
        ]
        for row in report.rows
    }
    total = report.total
    return {
        "total": [str(total.gpu_hours), str(total.budget_hours), str(total.cost_amount)],
        "rows": rows,
    }


def sums() -> None:
    viewer = User.objects.get(username="it")
    counts = {}
    with connection.cursor() as cursor:
        for model in apps.get_models(include_auto_created=True):
            table = model._meta.db_table
            if table in counts or model._meta.proxy or not model._meta.managed:
                continue
            cursor.execute(f'SELECT count(*) FROM "{table}"')
            counts[table] = cursor.fetchone()[0]
    figures = {
        "by_group": report_sums(("group",), viewer),
        "by_pool": report_sums(("pool",), viewer),
        "intervals": UsageInterval.objects.count(),
        "rows": counts,
    }
    print(json.dumps(figures, sort_keys=True))


{"build": build, "sums": sums}[os.environ["CHECK_BACKUP_STEP"]]()
