// The dashboard's live parts, drawn from the JSON embedded in the page.
//
// Study page: status, progress, the recommendation card, the charts and the trials table are
// drawn here and redrawn from a poll every few seconds while the study runs. A poll asks only
// for the trials above `after` (the lowest trial still running when last seen, or else the
// newest one seen) and sends `charts_at` (how many finished trials its charts show): the
// server sends chart data only when more have finished. The table shows one page of trials,
// newest first; older pages are fetched from /studies/{id}/trial-rows.
// Studies list: the table is fetched again (as HTML, the server's own rendering) and swapped.
(function () {
  "use strict";
  const el = document.getElementById("page-data");
  if (!el) return;
  const data = JSON.parse(el.textContent);
  const POLL_MS = 5000;
  const live = (status) => status === "queued" || status === "running";

  if (data.studies) { liveStudiesList(data); return; }
  if (!data.trials || typeof Chart === "undefined") return; // not a study page

  const charts = {};
  const okColor = "rgba(37, 99, 235, 0.75)", frontColor = "rgba(220, 38, 38, 0.95)";
  const known = new Map(data.trials.map((t) => [t.number, t])); // newest trials, by number
  let pageIndex = 0; // 0: the newest page
  let olderRows = null; // the rows of an older page, when one is shown

  // ------------------------------------------------------------------ formatting
  const fmt = {
    int: (v) => (v === null || v === undefined ? "" : Math.round(v).toLocaleString("en-US")),
    pct: (v) => (v === null || v === undefined ? "n/a" : (100 * v).toFixed(1) + "%"),
    fixed: (v, n) => (v === null || v === undefined ? "n/a" : Number(v).toFixed(n)),
  };
  function node(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function label(t) { // study/labels.py trial_label: cancelled, proxy, tight, else the state
    const msg = t.error_message || "";
    if (t.state === "failed" && msg.startsWith("cancelled with the study")) return "cancelled";
    if (t.purpose === "proxy" && t.state === "complete") return "proxy";
    if (t.tight) return "tight";
    return t.state;
  }

  // ------------------------------------------------------------------ status and progress
  function drawStatus(st) {
    const status = document.getElementById("status");
    status.textContent = st.status;
    status.className = "state " + st.status;
    const bar = document.getElementById("progress-bar");
    const counts = Object.entries(st.trial_counts).sort().map(([k, n]) => `${n} ${k}`).join(", ");
    if (st.progress !== null && st.progress !== undefined) bar.value = st.progress; else bar.remove();
    const budget = st.max_trials ? ` of ${st.max_trials}` : "";
    const best = st.best_value ? ` · best so far ${fmt.int(st.best_value)} ${st.objective === "tokens_per_s" ? "tokens/s" : st.objective}` : "";
    document.getElementById("progress-text").textContent =
      `${st.trials_launched}${budget} trials launched (${counts || "none yet"})${best}`;
  }

  // ------------------------------------------------------------------ the recommendation
  function drawBest(b) {
    const box = document.getElementById("best-body");
    box.replaceChildren();
    if (!b) { box.append(node("p", { class: "muted" }, "No completed trial yet.")); return; }
    const hr = b.headroom || {};
    box.append(node("div", { class: "metrics" },
      node("div", {}, node("b", { id: "best-tps" }, fmt.int(b.tokens_per_s)), node("span", {}, "tokens/s")),
      node("div", {}, node("b", {}, fmt.pct(b.mfu)), node("span", {}, "MFU")),
      node("div", {}, node("b", { id: "best-peak" }, fmt.fixed(hr.peak_gib ?? b.peak_mem_gib, 2)),
        node("span", {}, hr.peak_kind === "cuda" ? "peak GiB (reserved + context)" : "peak GiB")),
      node("div", {}, node("b", { id: "best-limit" }, hr.limit_gib ? fmt.fixed(hr.limit_gib, 1) : "n/a"), node("span", {}, "limit GiB")),
      node("div", {}, node("b", { id: "best-headroom" }, hr.headroom_rel === undefined || hr.headroom_rel === null ? "n/a" : fmt.pct(hr.headroom_rel)),
        node("span", {}, hr.free_rel === undefined || hr.free_rel === null ? "headroom" : `headroom (${fmt.pct(hr.free_rel)} free)`)),
      node("div", {}, node("b", { id: "best-trial" }, "#" + b.trial_number), node("span", {}, "trial")),
      node("div", {}, node("b", { id: "best-measurements" }, b.measurements), node("span", {}, "measurements"))));
    const kv = node("table", { class: "kv" });
    for (const k of Object.keys(b.params).sort()) kv.append(node("tr", {}, node("th", {}, k), node("td", {}, b.params[k])));
    box.append(kv);
    const r = b.runner_up;
    if (r) {
      box.append(node("p", {}, `Margin over trial #${r.trial_number}: ${(100 * r.margin_rel >= 0 ? "+" : "") + (100 * r.margin_rel).toFixed(1)}%, noise ±${(100 * r.noise_rel).toFixed(1)}%: `,
        node("b", {}, r.tie ? "a tie (within noise)" : "beyond noise")));
    }
    if (b.vs_expert_default && b.vs_expert_default.text) box.append(node("p", { id: "best-vs-default" }, "Against the expert default: " + b.vs_expert_default.text));
    if (hr.text) box.append(node("p", { id: "best-memory" }, "Memory: " + hr.text));
    if (b.global_batch && b.global_batch.text) box.append(node("p", { id: "best-batch" }, "Global batch: " + b.global_batch.text));
    if (b.input_pipeline && b.input_pipeline.text) box.append(node("p", {}, "Input pipeline: " + b.input_pipeline.text));
    if (b.numerics && b.numerics.text) box.append(node("p", {}, "Numerics: " + b.numerics.text));
    if (b.scaling && b.scaling.text) box.append(node("p", {}, "Scaling: " + b.scaling.text));
    if (b.importance && b.importance.length) {
      const imp = node("table", { class: "kv", id: "importance" });
      for (const row of b.importance) imp.append(node("tr", {}, node("th", {}, row.knob), node("td", {}, row.text || row.importance)));
      box.append(node("h3", {}, "Knob importance"), imp);
    }
  }

  // ------------------------------------------------------------------ charts
  function upsert(id, config) {
    if (charts[id]) { charts[id].data = config.data; charts[id].update("none"); return; }
    const canvas = document.getElementById(id);
    if (canvas) charts[id] = new Chart(canvas, config);
  }

  function drawProgress(p) {
    const xy = ([x, y]) => ({ x, y });
    upsert("chart-progress", {
      type: "scatter",
      data: { datasets: [
        { label: "trial tokens/s", data: p.points.map(xy), backgroundColor: okColor, pointRadius: p.shown > 300 ? 1.5 : 3 },
        { label: "best so far", data: p.best.map(xy), type: "line", stepped: true, borderColor: frontColor, pointRadius: 0 },
      ] },
      options: { animation: false, parsing: false, normalized: true,
        scales: { x: { title: { display: true, text: "trial #" }, ticks: { precision: 0 } },
                  y: { title: { display: true, text: "tokens/s" }, beginAtZero: true } } },
    });
    document.getElementById("progress-note").textContent = p.shown < p.measured
      ? `(${p.measured.toLocaleString("en-US")} measured; the min and max of each run of trials shown, the best-so-far line exact)` : "";
  }

  function drawPareto(p) {
    const pt = ([x, y, n]) => ({ x, y, n });
    upsert("chart-pareto", {
      type: "scatter",
      data: { datasets: [
        { label: "trials", data: p.others.map(pt), backgroundColor: okColor, pointRadius: p.others.length > 300 ? 1.5 : 3 },
        { label: "Pareto front", data: p.front.map(pt), backgroundColor: frontColor, borderColor: frontColor, showLine: true },
      ] },
      options: { animation: false, parsing: false,
        plugins: { tooltip: { callbacks: { label: (c) => `#${c.raw.n}: ${Math.round(c.raw.y)} tok/s, ${c.raw.x.toFixed(2)} GiB` } } },
        scales: { x: { title: { display: true, text: "peak memory (GiB)" } },
                  y: { title: { display: true, text: "tokens/s" }, beginAtZero: true } } },
    });
  }

  function drawEffects(effects) {
    const box = document.getElementById("effects");
    for (const [knob, rows] of Object.entries(effects)) {
      const id = "effect-" + knob;
      if (!document.getElementById(id)) box.append(node("div", {}, node("h3", {}, knob), node("canvas", { id })));
      upsert(id, {
        type: "bar",
        data: { labels: rows.map((r) => `${r.value} (${r.count}${r.failed ? ", " + r.failed + " failed" : ""})`),
                datasets: [{ label: "median tokens/s", data: rows.map((r) => r.median || 0), backgroundColor: okColor }] },
        options: { animation: false, indexAxis: "y", plugins: { legend: { display: false } } },
      });
    }
  }

  function drawCharts(c) {
    drawProgress(c.progress); drawPareto(c.pareto); drawEffects(c.effects);
    document.body.dataset.charts = String(Object.keys(charts).length); // for browser tests
  }

  // ------------------------------------------------------------------ the trials table
  function row(t) {
    const base = window.location.pathname.replace(/\/$/, "");
    const state = node("td", {}, node("span", { class: "state " + label(t) }, label(t)));
    if (t.retry_of !== null) state.append(" ", node("small", {}, `(retry of #${t.retry_of})`));
    const spread = t.tokens_per_s && t.tokens_per_s_min !== null && t.tokens_per_s_max !== null
      ? "±" + (100 * (t.tokens_per_s_max - t.tokens_per_s_min) / 2 / t.tokens_per_s).toFixed(1) + "%" : "";
    const cells = [
      node("td", {}, node("a", { href: `${base}/trials/${t.number}` }, t.number)), state,
      ...data.knobs.map((k) => node("td", {}, t.params[k] === undefined ? "" : t.params[k])),
      node("td", { class: "num" }, t.global_batch_tokens ? fmt.int(t.global_batch_tokens) : ""),
      node("td", { class: "num" }, t.tokens_per_s ? fmt.int(t.tokens_per_s) : ""),
      node("td", { class: "num" }, spread),
      node("td", { class: "num" }, t.mfu === null ? "" : fmt.pct(t.mfu)),
      node("td", { class: "num" }, t.peak_mem_gib === null ? "" : fmt.fixed(t.peak_mem_gib, 2)),
      node("td", { class: "num" }, t.compile_s ? fmt.fixed(t.compile_s, 1) : ""),
      node("td", { class: t.state === "pruned" ? "why" : "err" }, t.error_class ? `${t.error_class}: ${(t.error_message || "").slice(0, 120)}`
        : t.tight ? `tight: ${fmt.pct(t.memory_free_rel)} of the GPU memory free, less than the headroom` : ""),
    ];
    return node("tr", { class: t.state, "data-number": t.number }, ...cells);
  }

  function drawTable() {
    const size = data.page_size, total = data.study.trials_total;
    const pages = Math.max(1, Math.ceil(total / size));
    pageIndex = Math.min(pageIndex, pages - 1);
    let rows;
    if (pageIndex === 0) rows = [...known.values()].sort((a, b) => b.number - a.number).slice(0, size);
    else rows = (olderRows || []).slice().sort((a, b) => b.number - a.number);
    document.querySelector("#trials tbody").replaceChildren(...rows.map(row));
    const hi = total - pageIndex * size, lo = Math.max(hi - size, 0);
    document.getElementById("pager-text").textContent = total
      ? `(#${lo}–#${hi - 1} of ${total.toLocaleString("en-US")}, newest first; page ${pageIndex + 1} of ${pages})` : "";
    document.getElementById("page-newer").disabled = pageIndex === 0;
    document.getElementById("page-older").disabled = pageIndex >= pages - 1;
  }

  async function showPage(index) {
    const size = data.page_size, total = data.study.trials_total;
    if (index > 0) {
      const hi = total - index * size, lo = Math.max(hi - size, 0);
      const resp = await fetch(`${window.location.pathname.replace(/\/$/, "")}/trial-rows?after=${lo - 1}&limit=${hi - lo}`);
      if (!resp.ok) return;
      olderRows = await resp.json();
    }
    pageIndex = index;
    drawTable();
  }
  document.getElementById("page-newer").addEventListener("click", () => showPage(pageIndex - 1));
  document.getElementById("page-older").addEventListener("click", () => showPage(pageIndex + 1));

  // ------------------------------------------------------------------ live
  function drawAll() {
    drawStatus(data.study); drawBest(data.best); drawTable();
    if (data.charts) drawCharts(data.charts);
    document.body.dataset.trials = String(data.study.trials_total); // for browser tests
  }
  drawAll();
  // Navigation start to everything drawn, for bench/reads_10k.py's page-load measurement.
  document.body.dataset.readyMs = String(Math.round(performance.now()));

  function since() { // the trials a poll must return: the running ones and any newer
    let newest = -1, lowestRunning = null;
    for (const t of known.values()) {
      newest = Math.max(newest, t.number);
      if (t.state === "running" && (lowestRunning === null || t.number < lowestRunning)) lowestRunning = t.number;
    }
    return lowestRunning === null ? newest : lowestRunning - 1;
  }

  async function poll() {
    if (!live(data.study.status)) return;
    try {
      const url = `${window.location.pathname}?format=json&after=${since()}&charts_at=${data.charts_at}`;
      const resp = await fetch(url);
      if (resp.ok) {
        const d = await resp.json();
        for (const t of d.trials) known.set(t.number, t);
        // keep the newest page's worth (and the running ones) in memory
        const keep = [...known.keys()].sort((a, b) => b - a).slice(data.page_size);
        for (const n of keep) if (known.get(n).state !== "running") known.delete(n);
        data.study = d.study; data.best = d.best;
        if (d.charts) { data.charts = d.charts; data.charts_at = d.charts_at; }
        drawAll();
      }
    } catch (e) { /* the service may be restarting; try again next tick */ }
    if (live(data.study.status)) setTimeout(poll, POLL_MS);
  }
  if (live(data.study.status)) setTimeout(poll, POLL_MS);

  // ------------------------------------------------------------------ the studies list
  function liveStudiesList() {
    setInterval(async () => {
      try {
        const resp = await fetch(window.location.pathname, { headers: { Accept: "text/html" } });
        if (!resp.ok) return;
        const fresh = new DOMParser().parseFromString(await resp.text(), "text/html").querySelector("main");
        if (fresh) document.querySelector("main").replaceWith(fresh);
      } catch (e) { /* try again next tick */ }
    }, POLL_MS);
  }
})();
