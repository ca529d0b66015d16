"""The JSON shape of a usage report. Amounts are decimal strings (GPU-hours and budget hours with
three places, money with two), exactly the numbers of the page and the exports."""

from decimal import Decimal

from apps.ledger.selectors import Report

# What apps above the ledger add to a report's JSON (the cloud app: ``cloud_spend``), registered
# from their AppConfig.ready: each takes (user, spec) and returns the keys to add, empty for none.
REPORT_EXTRAS: list = []


def _plain(record: dict) -> dict:
    return {key: str(value) if isinstance(value, Decimal) else value for key, value in record.items()}


def report_data(report: Report) -> dict:
    spec = report.spec
    summary = report.summary_records()
    return {
        "start": spec.start.isoformat(),
        "end": spec.end.isoformat(),
        "until": report.stop.isoformat(),
        "by": list(spec.dims),
        "currency": spec.currency,
        "unused_capacity_mode": spec.idle or None,
        "columns": [{"key": key, "title": title, "kind": kind} for key, title, kind in report.columns()],
        "rows": [_plain(record) for record in report.records()],
        "total": _plain(summary[0]),
        "unused_capacity": _plain(summary[1]) if spec.idle else None,
        "capacity_in_force": _plain(summary[2]) if spec.idle else None,
        "adjustments": _plain(summary[-2]) if report.adjustments else None,
        "total_with_adjustments": _plain(summary[-1]) if report.adjustments else None,
        "utilisation_pct": None if report.utilisation is None else str(report.utilisation),
        "unpriced_gpu_hours": {name: str(value) for name, value in report.unpriced.items()},
        "rollups_until": report.rollups_until.isoformat() if report.rollups_until else None,
    }


def cloud_data(spend) -> dict:
    """Cloud spend (``apps.cloud.costs.CloudSpend``) over the report's range: estate-wide, whatever
    the report's filters."""
    return {
        "currency": spend.currency,
        "total": str(spend.total),
        "idle": str(spend.idle),
        "spare": str(spend.spare),
        "attributed": str(spend.attributed),
        "by_group": {str(group): str(amount) for group, amount in spend.by_group.items()},
        "node_hours": str(spend.node_hours),
        "idle_node_hours": str(spend.idle_hours),
        "unpriced_node_hours": str(spend.unpriced_node_hours),
        "lines": [
            {
                "pool": line.pool,
                "instance_type": line.instance_type,
                "market": line.market,
                "nodes": line.nodes,
                "node_hours": str(line.hours),
                "idle_node_hours": str(line.idle_hours),
                "cost": str(line.cost),
                "idle_cost": str(line.idle_cost),
                "unpriced_node_hours": str(line.unpriced_hours),
            }
            for line in spend.lines
        ],
    }
