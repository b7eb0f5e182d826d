// The compare page: two studies side by side (status, trials, best tokens/s and the ratio,
// the recommended config knob by knob, differences marked) and one chart of both studies'
// throughput over trials. Redrawn from a poll of the page's JSON while either study runs.
(function () {
  "use strict";
  const el = document.getElementById("page-data");
  if (!el || typeof Chart === "undefined") return;
  let data = JSON.parse(el.textContent);
  if (!data.a || !data.b) return;
  const { fmt, node, colors } = window.autotuner;
  const POLL_MS = 5000;
  const live = (st) => st.status === "queued" || st.status === "running";
  let chart = null;

  function model(st) {
    const m = st.model || {};
    const name = m.preset || m.family || "model";
    return `${name}: ${m.n_layer} layers, d_model ${m.d_model}, seq ${m.seq_len}`;
  }
  function trials(st) {
    const counts = Object.entries(st.trial_counts).sort().map(([k, n]) => `${n} ${k}`).join(", ");
    const budget = st.max_trials ? ` of ${st.max_trials}` : "";
    return `${st.trials_launched}${budget} launched (${counts || "none yet"})${window.autotuner.minutes(st)}`;
  }
  function devices(st) { return st.device_type === "cpu" ? "CPU" : `${st.gpus_per_trial} GPU${st.gpus_per_trial === 1 ? "" : "s"}`; }
  function status(st) { return node("span", { class: "state " + st.status }, st.status); }

  function drawTable() {
    const { a, b } = data;
    const ba = a.best || {}, bb = b.best || {};
    const hrA = ba.headroom || {}, hrB = bb.headroom || {};
    const rows = [
      ["status", status(a.study), status(b.study)],
      ["model", model(a.study), model(b.study)],
      ["space · per trial", `${a.study.space} · ${devices(a.study)}`, `${b.study.space} · ${devices(b.study)}`],
      ["trials", trials(a.study), trials(b.study)],
      ["best tokens/s", node("b", { id: "best-a" }, a.best ? fmt.int(ba.tokens_per_s) : "–"),
        node("b", { id: "best-b" }, b.best ? fmt.int(bb.tokens_per_s) : "–")],
      ["best trial", a.best ? "#" + ba.trial_number : "–", b.best ? "#" + bb.trial_number : "–"],
      ["MFU", a.best ? fmt.pct(ba.mfu) : "–", b.best ? fmt.pct(bb.mfu) : "–"],
      ["peak GiB", a.best ? fmt.fixed(hrA.peak_gib ?? ba.peak_mem_gib, 2) : "–", b.best ? fmt.fixed(hrB.peak_gib ?? bb.peak_mem_gib, 2) : "–"],
      ["measurements", a.best ? ba.measurements : "–", b.best ? bb.measurements : "–"],
    ];
    const body = document.querySelector("#compare tbody");
    body.replaceChildren(...rows.map(([k, x, y]) => node("tr", {}, node("th", {}, k), node("td", {}, x), node("td", {}, y))));
    // The recommended configs, knob by knob: a value that differs is marked.
    const knobs = [...new Set([...Object.keys(ba.params || {}), ...Object.keys(bb.params || {})])].sort();
    if (knobs.length) body.append(node("tr", { class: "section" }, node("th", { colspan: 3 }, "recommended config")));
    for (const k of knobs) {
      const x = (ba.params || {})[k], y = (bb.params || {})[k];
      const differs = String(x) !== String(y);
      body.append(node("tr", { class: differs ? "differs" : "", "data-knob": k }, node("th", {}, k),
        node("td", {}, x === undefined ? "–" : x), node("td", {}, y === undefined ? "–" : y)));
    }
    const note = document.getElementById("compare-note");
    if (a.best && b.best) {
      const ratio = bb.tokens_per_s / ba.tokens_per_s - 1;
      note.textContent = `B's best is ${fmt.signedPct(ratio)} against A's` +
        (a.study.model && b.study.model && model(a.study) !== model(b.study) ? " (different models: compare with care)." : ".");
    } else note.textContent = "A study with no completed trial has no best yet.";
  }

  function drawChart() {
    const xy = ([x, y]) => ({ x, y });
    const set = (side, name, dot, line) => [
      { label: `${name} trials`, data: data[side].progress.points.map(xy), backgroundColor: dot, pointRadius: data[side].progress.shown > 300 ? 1.5 : 3 },
      { label: `${name} best so far`, data: data[side].progress.best.map(xy), type: "line", stepped: true, borderColor: line, backgroundColor: line, pointRadius: 0 },
    ];
    const config = {
      type: "scatter",
      data: { datasets: [...set("a", "A", colors.okFaint, colors.ok), ...set("b", "B", colors.otherFaint, colors.other)] },
      options: { animation: false, parsing: false, normalized: true,
        scales: { x: { title: { display: true, text: "trial #" }, ticks: { precision: 0 } },
                  y: { title: { display: true, text: "tokens/s" }, beginAtZero: true } } },
    };
    if (chart) { chart.data = config.data; chart.update("none"); }
    else chart = new Chart(document.getElementById("chart-compare"), config);
  }

  function drawAll() {
    drawTable(); drawChart();
    document.body.dataset.compared = `${data.a.study.trials_total},${data.b.study.trials_total}`; // for browser tests
  }
  drawAll();

  async function poll() {
    try {
      const resp = await fetch(window.location.pathname + window.location.search + "&format=json");
      if (resp.ok) { data = await resp.json(); drawAll(); }
    } catch (e) { /* the service may be restarting; try again next tick */ }
    if (live(data.a.study) || live(data.b.study)) setTimeout(poll, POLL_MS);
  }
  if (live(data.a.study) || live(data.b.study)) setTimeout(poll, POLL_MS);
})();
