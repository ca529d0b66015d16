"""The capacity-planning view of a simulation: one self-contained HTML file (plotly.js inlined).

plotly is imported here only, and only when a report is asked for, so the core stays stdlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simulation import Simulation


def write_report(sim: Simulation, path: str) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    s = sim.series
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("GPUs in use per policy", "GPUs in use per pool", "Tasks waiting per policy"),
    )
    for i, p in enumerate(sim.sc.policies):
        fig.add_trace(
            go.Scatter(
                x=s.times,
                y=[row[i] / 1000 for row in s.policy_use],
                name=p.name,
                legendgroup="policy",
                legendgrouptitle_text="policy",
                stackgroup="policy",
                line_shape="hv",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=s.times,
                y=[row[i] for row in s.queued],
                name=p.name,
                legendgroup="queued",
                legendgrouptitle_text="waiting",
                line_shape="hv",
            ),
            row=3,
            col=1,
        )
    for i, p in enumerate(sim.sc.pools):
        fig.add_trace(
            go.Scatter(
                x=s.times,
                y=[row[i] / 1000 for row in s.pool_use],
                name=p.name,
                legendgroup="pool",
                legendgrouptitle_text="pool",
                line_shape="hv",
            ),
            row=2,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=s.times,
                y=[row[i] / 1000 for row in s.capacity],
                name=f"{p.name} capacity",
                legendgroup="pool",
                line={"dash": "dot", "shape": "hv"},
            ),
            row=2,
            col=1,
        )
    fig.update_xaxes(title_text="seconds since start", row=3, col=1)
    fig.update_layout(
        title=f"Simulation from {sim.sc.start.isoformat()}",
        hovermode="x unified",
        height=900,
    )
    fig.write_html(path, include_plotlyjs=True, full_html=True)
