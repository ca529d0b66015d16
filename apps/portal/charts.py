"""Charts built on the server with plotly from the selectors' figures, rendered by the plotly.js
served from ``static/vendor/`` (no CDN). Decimals become floats here, for drawing only. Each chart
is an empty box and its figure as JSON data; ``static/klique/charts.js`` draws it, so the pages
need no inline script (the Content-Security-Policy allows none).

A chart with nothing to draw (no bar above zero, no point) is a sentence instead of an empty
axis. Two units never share an axis: figures in a second unit (EUR beside GPU-hours) go on a
second y axis, on the right, with their own title.

A small used amount beside a large limit (12 budget hours used of 24,000) is drawn by ``against``:
the used amounts as bars labelled with their figure, the limits as a marker per bar group, and a
logarithmic y axis where a used bar would be under ``SMALL`` of the axis (``fit_axis``, which the
budget projection uses too). docs/portal.md, "Charts"."""

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import plotly.graph_objects as go
from django.utils.html import format_html, json_script

from klique import numbers

GPUS, HOURS = numbers.gpus, numbers.hours  # ``against``'s figures
SMALL = 0.05  # a bar under 5 % of its axis's height reads as nothing beside the tallest figure
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


@dataclass(frozen=True)
class Chart:
    title: str
    html: str
    empty: bool = False


NOTHING = "Nothing to show yet."


def _nothing(title: str, sentence: str) -> Chart:
    return Chart(title, format_html('<p class="chart-empty">{}</p>', sentence or NOTHING), empty=True)


def _has_data(series: dict[str, list]) -> bool:
    return any(v for values in series.values() for v in values)


def _render(chart_id: str, title: str, figure: go.Figure, y_title: str = "", right: int = 20) -> Chart:
    figure.update_layout(
        template="plotly_white",
        height=320,
        margin={"l": 50, "r": right, "t": 30, "b": 40},
        legend={"orientation": "h", "y": -0.2},
        yaxis_title=y_title,
        autosize=True,
    )
    drawing = json.loads(figure.to_json()) | {"config": CONFIG}
    html = format_html(
        '<div id="{}" class="plotly-graph-div klique-chart"></div>{}',
        chart_id,
        json_script(drawing, f"{chart_id}-figure"),
    )
    return Chart(title, html)


def bars(
    chart_id: str,
    title: str,
    x: list,
    series: dict[str, list],
    *,
    y_title: str = "",
    stacked: bool = False,
    secondary: dict[str, list] | None = None,
    y2_title: str = "",
    empty: str = "",
) -> Chart:
    """Bars per ``x``, one series each; ``secondary`` series (another unit) on a right-hand axis
    titled ``y2_title``. ``empty`` is the sentence shown when no bar is above zero."""
    secondary = secondary or {}
    if not x or not _has_data(series | secondary):
        return _nothing(title, empty)
    if not secondary:
        figure = go.Figure(
            [go.Bar(name=name, x=x, y=[float(v) for v in values]) for name, values in series.items()]
        )
        figure.update_layout(barmode="stack" if stacked else "group")
        return _render(chart_id, title, figure, y_title)
    groups = len(series) + len(secondary)
    traces = [
        go.Bar(name=name, x=x, y=[float(v) for v in values], offsetgroup=str(i), yaxis="y")
        for i, (name, values) in enumerate(series.items())
    ] + [
        go.Bar(name=name, x=x, y=[float(v) for v in values], offsetgroup=str(len(series) + i), yaxis="y2")
        for i, (name, values) in enumerate(secondary.items())
    ]
    figure = go.Figure(traces)
    figure.update_layout(
        barmode="group",
        bargap=0.3,
        bargroupgap=0.1 if groups > 1 else 0,
        yaxis2={"title": y2_title, "overlaying": "y", "side": "right", "rangemode": "tozero"},
        yaxis={"rangemode": "tozero"},
    )
    return _render(chart_id, title, figure, y_title, right=70)


def lines(
    chart_id: str, title: str, x: list, series: dict[str, list], *, y_title: str = "", empty: str = ""
) -> Chart:
    if not x or not any(values for values in series.values()):
        return _nothing(title, empty)
    figure = go.Figure(
        [
            go.Scatter(name=name, x=x, y=[float(v) for v in values], mode="lines+markers")
            for name, values in series.items()
        ]
    )
    return _render(chart_id, title, figure, y_title)


def budget_projection(chart_id: str, title: str, status, now: datetime) -> Chart:
    """A time budget's period: budget hours used so far and, at the current burn rate, until the
    projected run-out or the reset, whichever comes first."""
    end = min(status.projected_run_out or status.resets_at, status.resets_at)
    projected = status.used_hours + status.burn_rate * Decimal((end - now).total_seconds()) / 3600
    budget = float(status.budget_hours)
    figure = go.Figure(
        [
            go.Scatter(
                name="used",
                x=[status.period_start, now],
                y=[0, float(status.used_hours)],
                mode="lines+markers",
            ),
            go.Scatter(
                name="projected at the burn rate",
                x=[now, end],
                y=[float(status.used_hours), float(projected)],
                line={"dash": "dot"},
            ),
            go.Scatter(
                name="budget", x=[status.period_start, status.resets_at], y=[budget, budget], mode="lines"
            ),
        ]
    )
    log = fit_axis(figure, [status.used_hours], [projected, status.budget_hours])
    return _render(chart_id, title, figure, "budget hours (log scale)" if log else "budget hours")


def fit_axis(figure: go.Figure, used: list, others: list) -> bool:
    """Make the y axis logarithmic when a ``used`` figure above zero would be under ``SMALL`` of the
    largest figure drawn (``used`` and ``others``): each order of magnitude gets the same height,
    so 12 shows beside 24,000. True when it did."""
    shown = [float(v) for v in used if v is not None and v > 0]
    top = max([float(v) for v in [*used, *others] if v is not None] or [0])
    if not shown or min(shown) >= SMALL * top:
        return False
    figure.update_yaxes(type="log", tickformat=",", exponentformat="none")
    return True


def against(
    chart_id: str,
    title: str,
    x: list,
    used: dict[str, list],
    limits: dict[str, list],
    *,
    y_title: str = "",
    figure_of=GPUS,
    empty: str = "",
) -> Chart:
    """Used amounts (GPUs in use, hours used) per ``x`` as bars labelled with their figure
    (``figure_of``, a ``klique.numbers`` function), and the ``limits`` they are measured against
    (reservation, limit, budget, declared capacity) as a wide marker per ``x``; None where one has
    none. The y axis turns logarithmic when a used bar would be too small to see (``fit_axis``)."""
    if not x or not _has_data(used | limits):
        return _nothing(title, empty)
    traces = [
        go.Bar(
            name=name,
            x=x,
            y=[float(v or 0) for v in values],
            text=[figure_of(v or 0) for v in values],
            textposition="outside",
            cliponaxis=False,
        )
        for name, values in used.items()
    ]
    symbols = ("line-ew-open", "diamond-wide-open", "triangle-down-open")
    traces += [
        go.Scatter(
            name=name,
            x=x,
            y=[None if v is None else float(v) for v in values],
            mode="markers",
            marker={"symbol": symbols[i % len(symbols)], "size": 26, "line": {"width": 3}},
        )
        for i, (name, values) in enumerate(limits.items())
    ]
    figure = go.Figure(traces)
    figure.update_layout(barmode="group")
    log = fit_axis(
        figure,
        [v for values in used.values() for v in values],
        [v for values in limits.values() for v in values],
    )
    return _render(chart_id, title, figure, f"{y_title} (log scale)" if log and y_title else y_title)
