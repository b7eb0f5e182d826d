// Draws the study page's charts from the JSON embedded in the page, and redraws them (by
// reloading the page's JSON) every few seconds while the study is still running.
(function () {
  "use strict";
  const el = document.getElementById("page-data");
  if (!el || typeof Chart === "undefined") return;
  let data = JSON.parse(el.textContent);
  if (!data.trials) return; // not a study page

  const charts = {};
  const okColor = "rgba(37, 99, 235, 0.75)", frontColor = "rgba(220, 38, 38, 0.95)";

  function measured(trials) {
    return trials.filter((t) => t.state === "complete" && t.tokens_per_s);
  }

  function upsert(id, config) {
    if (charts[id]) { charts[id].data = config.data; charts[id].update("none"); return; }
    const canvas = document.getElementById(id);
    if (canvas) charts[id] = new Chart(canvas, config);
  }

  function drawProgress(d) {
    const ok = measured(d.trials);
    let best = 0;
    const bestLine = ok.map((t) => ({ x: t.number, y: (best = Math.max(best, t.tokens_per_s)) }));
    upsert("chart-progress", {
      type: "scatter",
      data: { datasets: [
        { label: "trial tokens/s", data: ok.map((t) => ({ x: t.number, y: t.tokens_per_s })), backgroundColor: okColor },
        { label: "best so far", data: bestLine, type: "line", stepped: true, borderColor: frontColor, pointRadius: 0 },
      ] },
      options: { animation: false, scales: { x: { title: { display: true, text: "trial #" } },
                                              y: { title: { display: true, text: "tokens/s" }, beginAtZero: true } } },
    });
  }

  function drawPareto(d) {
    const ok = measured(d.trials).filter((t) => t.peak_mem_gib !== null);
    const front = new Set(d.pareto);
    const pt = (t) => ({ x: t.peak_mem_gib, y: t.tokens_per_s, n: t.number });
    upsert("chart-pareto", {
      type: "scatter",
      data: { datasets: [
        { label: "trials", data: ok.filter((t) => !front.has(t.number)).map(pt), backgroundColor: okColor },
        { label: "Pareto front", data: ok.filter((t) => front.has(t.number)).map(pt).sort((a, b) => a.x - b.x),
          backgroundColor: frontColor, borderColor: frontColor, showLine: true },
      ] },
      options: { animation: false,
        plugins: { tooltip: { callbacks: { label: (c) => `#${c.raw.n}: ${Math.round(c.raw.y)} tok/s, ${c.raw.x.toFixed(2)} GiB` } } },
        scales: { x: { title: { display: true, text: "peak memory (GiB)" } },
                  y: { title: { display: true, text: "tokens/s" }, beginAtZero: true } } },
    });
  }

  function drawEffects(d) {
    const box = document.getElementById("effects");
    if (!box) return;
    for (const [knob, rows] of Object.entries(d.effects)) {
      const id = "effect-" + knob;
      if (!document.getElementById(id)) {
        const wrap = document.createElement("div");
        wrap.innerHTML = `<h3>${knob}</h3><canvas id="${id}"></canvas>`;
        box.appendChild(wrap);
      }
      upsert(id, {
        type: "bar",
        data: { labels: rows.map((r) => `${r.value} (${r.count}${r.failed ? ", " + r.failed + " failed" : ""})`),
                datasets: [{ label: "median tokens/s", data: rows.map((r) => r.median || 0), backgroundColor: okColor }] },
        options: { animation: false, indexAxis: "y", plugins: { legend: { display: false } } },
      });
    }
  }

  function drawAll(d) {
    drawProgress(d); drawPareto(d); drawEffects(d);
    document.body.dataset.charts = String(Object.keys(charts).length); // for browser tests
  }
  drawAll(data);

  // Live: poll while the study runs; reload the page once it finishes so tables are complete.
  const live = ["queued", "running"];
  if (live.includes(data.study.status)) {
    const timer = setInterval(async () => {
      try {
        const resp = await fetch(window.location.pathname + "?format=json");
        if (!resp.ok) return;
        data = await resp.json();
        drawAll(data);
        if (!live.includes(data.study.status)) { clearInterval(timer); window.location.reload(); }
      } catch (e) { /* the service may be restarting; try again next tick */ }
    }, 5000);
  }
})();
