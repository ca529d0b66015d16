// Plotly sizes a chart once, when it is drawn, before the page's grid has settled: redraw each
// chart at the size of its box whenever that box changes (layout, window, phone menu).
document.addEventListener("DOMContentLoaded", () => {
  const observer = new ResizeObserver((entries) => entries.forEach((entry) => Plotly.Plots.resize(entry.target)));
  document.querySelectorAll(".js-plotly-plot").forEach((chart) => observer.observe(chart));
});
