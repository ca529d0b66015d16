// Draw each chart from its figure (a JSON data block next to its box: no inline script, for the
// Content-Security-Policy). Plotly sizes a chart once, when it is drawn, before the page's grid has
// settled: redraw each chart at the size of its box whenever that box changes (layout, window,
// phone menu).
document.addEventListener("DOMContentLoaded", () => {
  const observer = new ResizeObserver((entries) => entries.forEach((entry) => Plotly.Plots.resize(entry.target)));
  document.querySelectorAll(".klique-chart").forEach((chart) => {
    const figure = JSON.parse(document.getElementById(`${chart.id}-figure`).textContent);
    Plotly.newPlot(chart, figure.data, figure.layout, figure.config).then(() => observer.observe(chart));
  });
});
