// The trial page's charts: the GPU telemetry over the measured repeats (SM utilisation, power,
// SM clock against the device's max, memory used against the limit), and the study's models'
// at-launch predictions against what the trial measured. The numbers are in the page's tables;
// these draw their shape.
(function () {
  "use strict";
  const el = document.getElementById("page-data");
  if (!el || typeof Chart === "undefined") return;
  const data = JSON.parse(el.textContent);
  if (!data.trial) return;
  const { fmt, colors } = window.autotuner;
  const result = data.trial.result || {};
  const tel = result.telemetry || {};
  let drawn = 0;

  function lineChart(id, series, label, color, refs) {
    const canvas = document.getElementById(id);
    if (!canvas || !series || !series.length) return;
    const t = tel.series.t_s;
    const datasets = [{ label, data: series.map((y, i) => ({ x: t[i], y })), borderColor: color,
      backgroundColor: color, pointRadius: 0, borderWidth: 1.5, spanGaps: false }];
    for (const ref of refs || []) {
      if (ref.value === null || ref.value === undefined) continue;
      datasets.push({ label: ref.label, data: [{ x: t[0], y: ref.value }, { x: t[t.length - 1], y: ref.value }],
        borderColor: ref.color, backgroundColor: ref.color, borderDash: [6, 4], pointRadius: 0, borderWidth: 1.5 });
    }
    new Chart(canvas, {
      type: "line",
      data: { datasets },
      options: { animation: false, parsing: false,
        plugins: { legend: { display: datasets.length > 1, labels: { boxHeight: 2 } } },
        scales: { x: { type: "linear", title: { display: true, text: "s into the measured repeats" } },
                  y: { beginAtZero: true } } },
    });
    drawn += 1;
  }

  if (tel.series) {
    const s = tel.series;
    lineChart("chart-sm", s.sm_util_pct, "SM busy %", colors.ok, [{ value: 100, label: "100%", color: colors.muted }]);
    lineChart("chart-power", s.power_w, "power W", colors.other);
    lineChart("chart-clock", s.sm_clock_mhz, "SM clock MHz", colors.ok,
      [{ value: tel.sm_clock_max_mhz, label: "device max", color: colors.muted }]);
    lineChart("chart-memory", s.mem_used_gib, "used GiB", colors.ok, [
      { value: result.memory_limit_gib, label: "limit", color: colors.bad },
      { value: result.peak_reserved_gib ?? result.peak_mem_gib, label: "torch peak", color: colors.ink },
    ]);
  }

  // Predicted vs measured: one bar each, the limit or the prediction's ±sd marked.
  function barChart(id, labels, values, barColors, extra) {
    const canvas = document.getElementById(id);
    if (!canvas) return;
    const datasets = [{ data: values, backgroundColor: barColors, barPercentage: 0.6 }];
    if (extra) datasets.push(extra);
    new Chart(canvas, {
      type: "bar",
      data: { labels, datasets },
      options: { animation: false, aspectRatio: 3, indexAxis: "y", plugins: { legend: { display: false },
        tooltip: { callbacks: { label: (c) => fmt.fixed(c.raw.x ?? c.raw, 2) } } },
        scales: { x: { beginAtZero: true } } },
    });
    drawn += 1;
  }
  const pred = data.predictions || {};
  if (pred.memory) {
    const labels = ["predicted", "measured"], values = [pred.memory.predicted_gib, pred.memory.measured_gib];
    if (pred.limit_gib) { labels.push("limit"); values.push(pred.limit_gib); }
    barChart("chart-predicted-memory", labels, values, [colors.okFaint, colors.ok, colors.bad]);
  }
  if (pred.throughput) {
    const p = pred.throughput;
    barChart("chart-predicted-throughput", ["predicted", "measured"],
      [p.predicted_tokens_per_s, p.measured_tokens_per_s], [colors.okFaint, colors.ok],
      { type: "scatter", data: [{ x: Math.max(0, p.predicted_tokens_per_s - p.predicted_sd), y: "predicted" },
        { x: p.predicted_tokens_per_s + p.predicted_sd, y: "predicted" }],
        showLine: true, borderColor: colors.ink, backgroundColor: colors.ink, pointStyle: "line", pointRadius: 6 });
  }
  // The numerics check: this run's loss per parity step beside its partner's.
  const num = data.numerics;
  const parityCanvas = document.getElementById("chart-parity");
  if (num && parityCanvas) {
    const datasets = [];
    // The reference dashed over the candidate: a passing check's curves lie on each other.
    const styles = { reference: { color: colors.ink, dash: [6, 4], width: 1.5 },
                     candidate: { color: colors.ok, dash: [], width: 3 } };
    for (const side of ["reference", "candidate"]) {
      const run = num[side], style = styles[side];
      if (!run || !run.curve) continue;
      datasets.push({ label: `${side}: #${run.number} ${run.name || run.precision}`, borderColor: style.color,
        backgroundColor: style.color, borderDash: style.dash, borderWidth: style.width,
        data: run.curve.map((y, i) => ({ x: i + 1, y })), pointRadius: 0 });
    }
    new Chart(parityCanvas, {
      type: "line",
      data: { datasets },
      options: { animation: false, parsing: false, aspectRatio: 3,
        plugins: { legend: { display: true, labels: { boxHeight: 2 } },
          tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${fmt.fixed(c.raw.y, 3)}` } } },
        scales: { x: { type: "linear", title: { display: true, text: "parity step" }, ticks: { precision: 0 } },
                  y: { title: { display: true, text: "loss" } } } },
    });
    drawn += 1;
  }
  document.body.dataset.trialCharts = String(drawn); // for browser tests
})();
