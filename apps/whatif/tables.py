"""The what-if page's tables (django-tables2): the saved runs, and a run's two sides side by side
with the difference, from its report (docs/whatif.md, "The report"). Figures are shown with the
portal's formatting (``apps.portal.tables``, ``klique.numbers``); the CSV export keeps them exact."""

from __future__ import annotations

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html

from apps.portal import tables as portal
from apps.whatif.models import WhatIfRun
from klique import numbers

NUM = portal.NUM
SIDES = (("base", "As recorded"), ("changed", "Changed"), ("difference", "Difference"))


def period(run: WhatIfRun) -> str:
    return f"{run.start:%Y-%m-%d %H:%M} to {run.end:%Y-%m-%d %H:%M} UTC"


def scope(run: WhatIfRun) -> str:
    return ", ".join(run.groups) if run.groups else "whole estate"


def state_html(run: WhatIfRun):
    """The state, with the progress of a run not finished."""
    if run.state in (WhatIfRun.State.QUEUED, WhatIfRun.State.RUNNING):
        return format_html(
            '{} <progress value="{}" max="1"></progress> {}',
            run.get_state_display(),
            run.progress,
            numbers.percent(run.progress),
        )
    return run.get_state_display()


class RunTable(tables.Table):
    title = tables.Column(verbose_name="Run", order_by=("title", "pk"))
    created_by = tables.Column(verbose_name="Run by", accessor="created_by__username", default="—")
    period = tables.Column(empty_values=(), order_by=("start", "end"))
    scope = tables.Column(empty_values=(), orderable=False)
    state = tables.Column(order_by=("state",))
    created_at = portal.WhenColumn(verbose_name="Created")

    class Meta(portal.Grid):
        model = WhatIfRun
        fields = ("title", "created_by", "period", "scope", "state", "created_at")
        order_by = ("-created_at",)
        empty_text = "No run yet."

    def render_title(self, record):
        return format_html('<a href="{}">{}</a>', reverse("portal:whatif-run", args=[record.pk]), str(record))

    def value_title(self, record):
        return str(record)

    def render_period(self, record):
        return period(record)

    def render_scope(self, record):
        return scope(record)

    def render_state(self, record):
        return state_html(record)

    def value_state(self, record):
        return record.state


KIND_WORDS = {
    "reservations": "Reservation of {} (GPUs)",
    "limits": "Limit of {} (GPUs)",
    "budgets": "Budget of {}",
    "time_weights": "Time weight of {}",
    "pool_order": "Pool order of {}",
    "capacities": "Capacity of {} (GPUs)",
    "lending": "Lending of {} to its children",
    "over_quota_weights": "Over-quota weight of {}",
}


# The changes keyed by a group's slug (the others by a profile's or a pool's name).
GROUP_KINDS = ("reservations", "limits", "budgets", "lending", "over_quota_weights")


def change_group_slugs(changes: dict) -> set[str]:
    return {slug for kind in GROUP_KINDS for slug in (changes.get(kind) or {})}


def describe(changes: dict, names: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """A run's changes as (what, new value) lines; ``names``: the groups' names by slug."""
    names = names or {}
    lines = []
    for kind, template in KIND_WORDS.items():
        for key, value in (changes.get(kind) or {}).items():
            label = names.get(key, key) if kind in GROUP_KINDS else key
            lines.append((template.format(label), _value_text(kind, value)))
    return lines


def _value_text(kind: str, value) -> str:
    if kind == "pool_order" and isinstance(value, list):
        return " then ".join(map(str, value))
    if kind in ("reservations", "limits", "capacities"):
        return numbers.gpus(value)
    if kind == "budgets":
        windows = [value] if isinstance(value, dict) else value
        if windows == []:
            return "no budget"
        if isinstance(windows, list) and all(isinstance(w, dict) for w in windows):
            return "; ".join(
                f"{numbers.plural(w.get('hours'), 'hour', figure=numbers.hours)} a {w.get('period')}"
                for w in windows
            )
    return str(value)


# -- the comparison ------------------------------------------------------------------------


def signed(text: str, value) -> str:
    """A difference with its sign: "+2", "-90"; "0", "0 %" and "< 0.1" as they are."""
    shown_above_zero = text[:1].isdigit() and any(c in "123456789" for c in text)
    return f"+{text}" if isinstance(value, int | float) and value > 0 and shown_above_zero else text


class Figure(tables.Column):
    """One side's figure of a metric (``accessor`` METRIC__SIDE), shown with ``fmt``."""

    def __init__(self, metric: str, side: str, fmt, heading: str, verbose_name: str):
        self.fmt, self.side, self.heading = fmt, side, heading
        super().__init__(
            accessor=f"{metric}__{side}",
            verbose_name=verbose_name,
            attrs=NUM,
            orderable=False,
            empty_values=(),
        )

    def render(self, value):
        text = self.fmt(value)
        return signed(text, value) if self.side == "difference" else text

    def value(self, value):
        return value


def trio(metric: str, fmt, heading: str) -> list[Figure]:
    return [Figure(metric, side, fmt, heading, label) for side, label in SIDES]


def seconds(value) -> str:
    return numbers.count(value)


class ComparisonTable(tables.Table):
    """A table whose figures come in threes (as recorded, changed, difference) under a header
    naming the metric (``header_groups``)."""

    name = tables.Column(orderable=False)

    class Meta(portal.Grid):
        template_name = "whatif/_comparison_table.html"

    def __init__(self, data, **kwargs):
        super().__init__(data, **kwargs)
        self.header_groups = []
        for bound in self.columns:
            label = getattr(bound.column, "heading", "")
            if self.header_groups and label and self.header_groups[-1][0] == label:
                self.header_groups[-1][1] += 1
            else:
                self.header_groups.append([label, 1])


def comparison_table(
    name: str, title: str, metrics: list[tuple[str, object, str]], rows, *, extra=(), empty: str = ""
):
    """A ``ComparisonTable`` class named ``name`` with a first column ``title``, ``extra`` plain
    columns, and the three figures of each (metric, format, header) of ``metrics``."""
    attrs = {"name": tables.Column(verbose_name=title, orderable=False)}
    for key, label in extra:
        attrs[key] = tables.Column(verbose_name=label, orderable=False)
    for metric, fmt, header in metrics:
        for figure in trio(metric, fmt, header):
            attrs[f"{metric}_{figure.side}"] = figure
    attrs["Meta"] = type(
        "Meta", (ComparisonTable.Meta,), {"sequence": ("name", *[k for k, _ in extra], "...")}
    )
    return type(name, (ComparisonTable,), attrs)(rows, prefix=f"{name.lower()}-", empty_text=empty or None)


def _trio(report: dict, *path) -> dict:
    out = {}
    for side, _ in SIDES:
        value = report[side]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        out[side] = value
    return out


def comparison(report: dict, names: dict[str, str]) -> dict[str, ComparisonTable]:
    """The tables of a report: waits, hours, budget overshoot and preemptions per group,
    utilisation per pool, tasks by final state. ``names``: the groups' names by slug."""
    groups = list(report["base"]["groups"])
    pools = list(report["base"]["pools"])
    threshold = numbers.count(report["wait_threshold_s"])

    def group_rows(*metrics):
        return [
            {"name": names.get(g, g)} | {m: _trio(report, "groups", g, m) for m in metrics} for g in groups
        ]

    waits = comparison_table(
        "Waits",
        "Group",
        [
            ("wait_median_s", seconds, "Median wait (s)"),
            ("wait_p95_s", seconds, "p95 wait (s)"),
            ("waited_past_threshold", numbers.count, f"Tasks waiting over {threshold} s"),
        ],
        group_rows("wait_median_s", "wait_p95_s", "waited_past_threshold"),
    )
    hours = comparison_table(
        "Hours",
        "Group",
        [
            ("tasks", numbers.count, "Tasks placed or waiting"),
            ("gpu_hours", portal.hours, "GPU-hours"),
            ("budget_hours", portal.hours, "Budget hours"),
        ],
        group_rows("tasks", "gpu_hours", "budget_hours"),
    )
    overshoot_rows = []
    for g in groups:
        periods = dict.fromkeys(
            [
                *report["base"]["groups"][g]["budget_overshoot_hours"],
                *report["changed"]["groups"][g]["budget_overshoot_hours"],
            ]
        )
        for p in periods:
            overshoot_rows.append(
                {
                    "name": names.get(g, g),
                    "period": p,
                    "hours": _trio(report, "groups", g, "budget_overshoot_hours", p),
                }
            )
    overshoot = comparison_table(
        "Overshoot",
        "Group",
        [("hours", portal.hours, "Budget hours over the budget")],
        overshoot_rows,
        extra=[("period", "Budget period")],
        empty="No budget window in the scope.",
    )
    reasons = list(report["base"]["preemptions"])
    preemption_rows = [
        {"name": names.get(g, g)} | {r: _trio(report, "groups", g, "preemptions", r) for r in reasons}
        for g in groups
        if any(
            report[side]["groups"][g]["preemptions"].get(r) for side in ("base", "changed") for r in reasons
        )
    ]
    preemption_rows.append({"name": "All groups"} | {r: _trio(report, "preemptions", r) for r in reasons})
    preemptions = comparison_table(
        "Preemptions",
        "Group",
        [(r, numbers.count, f"Preempted ({r})") for r in reasons],
        preemption_rows,
    )
    pool_table = comparison_table(
        "Pools",
        "Pool",
        [("utilization", numbers.percent, "Utilisation"), ("gpu_hours", portal.hours, "GPU-hours")],
        [
            {"name": p} | {m: _trio(report, "pools", p, m) for m in ("utilization", "gpu_hours")}
            for p in pools
        ],
    )
    states = dict.fromkeys([*report["base"]["tasks"], *report["changed"]["tasks"]])
    state_table = comparison_table(
        "States",
        "Final state",
        [("count", numbers.count, "Tasks")],
        [{"name": s, "count": _trio(report, "tasks", s)} for s in states],
    )
    return {
        "waits": waits,
        "hours": hours,
        "overshoot": overshoot,
        "preemptions": preemptions,
        "pools": pool_table,
        "states": state_table,
    }
