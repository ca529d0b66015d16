"""Charts built on the server with plotly from the selectors' figures, rendered by the plotly.js
served from ``static/vendor/`` (no CDN). Decimals become floats here, for drawing only. Each chart
is an empty box and its figure as JSON data; ``static/klique/charts.js`` draws it, so the pages
need no inline script (the Content-Security-Policy allows none).

A chart with nothing to draw (no bar above zero, no point) is a sentence instead of an empty
axis. Two units never share an axis: figures in a second unit (EUR beside GPU-hours) go on a
second y axis, on the right, with their own title."""

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import plotly.graph_objects as go
from django.utils.html import format_html, json_script

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
            go.Scatter(name="used", x=[status.period_start, now], y=[0, float(status.used_hours)]),
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
    return _render(chart_id, title, figure, "budget hours")
