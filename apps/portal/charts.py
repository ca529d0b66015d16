"""Charts built on the server with plotly from the selectors' figures, rendered by the plotly.js
served from ``static/vendor/`` (no CDN). Decimals become floats here, for drawing only. Each chart
is an empty box and its figure as JSON data; ``static/klique/charts.js`` draws it, so the pages
need no inline script (the Content-Security-Policy allows none)."""

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


def _render(chart_id: str, title: str, figure: go.Figure, y_title: str = "") -> Chart:
    figure.update_layout(
        template="plotly_white",
        height=320,
        margin={"l": 50, "r": 20, "t": 30, "b": 40},
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
    chart_id: str, title: str, x: list, series: dict[str, list], *, y_title: str = "", stacked: bool = False
) -> Chart:
    figure = go.Figure(
        [go.Bar(name=name, x=x, y=[float(v) for v in values]) for name, values in series.items()]
    )
    figure.update_layout(barmode="stack" if stacked else "group")
    return _render(chart_id, title, figure, y_title)


def lines(chart_id: str, title: str, x: list, series: dict[str, list], *, y_title: str = "") -> Chart:
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
