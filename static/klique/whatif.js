// The what-if page (docs/whatif.md): fill the dates of a preset period, add change rows, and on a
// run's page follow its progress until it is done, then show the comparison. No inline script,
// for the Content-Security-Policy: the presets come from a JSON data block.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("whatif-form");
  if (form) {
    const presets = JSON.parse(document.getElementById("whatif-presets").textContent);
    const preset = form.querySelector("[name=preset]");
    const start = form.querySelector("[name=start]");
    const end = form.querySelector("[name=end]");
    preset.addEventListener("change", () => {
      if (presets[preset.value]) [start.value, end.value] = presets[preset.value];
    });
    [start, end].forEach((input) => input.addEventListener("input", () => { preset.value = ""; }));

    const add = document.getElementById("add-change");
    const total = form.querySelector("[name=changes-TOTAL_FORMS]");
    const template = document.getElementById("change-row-template");
    const body = document.querySelector("#change-rows tbody");
    add.hidden = false;
    add.addEventListener("click", () => {
      const html = template.innerHTML.replaceAll("__prefix__", total.value);
      body.insertAdjacentHTML("beforeend", html);
      total.value = Number(total.value) + 1;
    });
  }

  const progress = document.getElementById("whatif-progress");
  if (progress) {
    const bar = document.getElementById("whatif-progress-bar");
    const text = document.getElementById("whatif-progress-text");
    const state = document.getElementById("run-state");
    const tasks = document.getElementById("run-tasks");
    const poll = async () => {
      try {
        const response = await fetch(progress.dataset.statusUrl, { headers: { Accept: "application/json" } });
        if (response.ok) {
          const run = await response.json();
          bar.value = run.progress;
          text.textContent = `${run.state_display}, ${Math.floor(run.progress * 100)} %`;
          state.textContent = run.state_display;
          if (run.tasks !== null) tasks.textContent = run.tasks.toLocaleString("en-US");
          if (run.finished) {
            window.location.reload();
            return;
          }
        }
      } catch (error) {
        text.textContent = "Lost touch with the server; trying again.";
      }
      window.setTimeout(poll, 1000);
    };
    window.setTimeout(poll, 500);
  }
});
