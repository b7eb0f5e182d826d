// The dashboard's live parts, drawn from the JSON embedded in the page.
//
// Study page: status, progress, the recommendation card, the charts and the trials table are
// drawn here and redrawn from a poll every few seconds while the study runs. A poll asks only
// for the trials above `after` (the lowest trial still running when last seen, or else the
// newest one seen) and sends `charts_at` (how many finished trials its charts show): the
// server sends chart data only when more have finished. The table shows one page of trials,
// newest first; older pages are fetched from /studies/{id}/trial-rows.
// Studies list: the list is fetched again (as HTML, the server's own rendering of the page's
// address, filters included) and swapped; the filter bar above it stays.
(function () {
  "use strict";
  const el = document.getElementById("page-data");
  if (!el) return;
  const data = JSON.parse(el.textContent);
  const POLL_MS = 5000;
  const live = (status) => status === "queued" || status === "running";
  const PARITY_RUNS = data.not_measurements || []; // their tokens/s is no throughput (trial_list.py)
  const PURPOSES = data.purpose_tags || {}; // study/labels.py PURPOSE_TAGS: why a trial re-ran

  if (data.studies) { liveStudiesList(data); return; }
  if (!data.trials || typeof Chart === "undefined") return; // not a study page

  const charts = {};
  const okColor = window.autotuner.colors.ok, frontColor = window.autotuner.colors.front;
  const known = new Map(data.trials.map((t) => [t.number, t])); // newest trials, by number
  let pageIndex = 0; // 0: the newest page
  let olderRows = null; // the rows of an older page, when one is shown

  const { fmt, node, label, missing } = window.autotuner;

  // ------------------------------------------------------------------ status and progress
  function drawStatus(st) {
    const status = document.getElementById("status");
    status.textContent = st.status;
    status.className = "state " + st.status;
    const bar = document.getElementById("progress-bar");
    const counts = Object.entries(st.trial_counts).sort().map(([k, n]) => `${n} ${k}`).join(", ");
    if (st.progress !== null && st.progress !== undefined) bar.value = st.progress; else bar.remove();
    const budget = st.max_trials ? ` of ${st.max_trials}` : "";
    // The recommendation's value, as the card below shows it: the fastest measured trial
    // (best_value) can be one it passed over for memory headroom or numerics.
    // With nothing recommendable (every measured trial tight: Llama 8B on one H200) the fastest
    // is named as such, not as a best the card below then says does not exist.
    const value = st.recommended_value ?? (data.best ? st.best_value : null);
    const unit = st.objective === "tokens_per_s" ? "tokens/s" : st.objective;
    // The trial the card below names: one source for the number and the trial.
    const number = data.best ? data.best.trial_number : st.best_trial_number;
    const best = value
      ? ` · best so far ${fmt.int(value)} ${unit}${missing(number) ? "" : ` (trial #${number})`}`
      : missing(st.best_value) ? "" : ` · fastest ${fmt.int(st.best_value)} ${unit}, none recommendable`;
    document.getElementById("progress-text").textContent =
      `${st.trials_launched}${budget} trials launched (${counts || "none yet"})${window.autotuner.minutes(st)}${best}`;
  }

  // ------------------------------------------------------------------ the recommendation
  function drawBest(b, unfinished) {
    const box = document.getElementById("best-body");
    box.replaceChildren();
    // A cancelled, failed or interrupted study: its best so far, said so (as the CLI's `best`).
    document.getElementById("best-title").textContent = unfinished ? "Best so far (not a recommendation)" : "Recommendation";
    if (unfinished) {
      box.append(node("p", { class: "warn", id: "best-unfinished" }, unfinished));
      document.getElementById("apply")?.remove(); // nothing to apply to a trainer
    }
    if (!b) {
      const st = data.study;
      // Ended without one measured trial (Llama 8B on one H200: every trial out of memory):
      // nothing to apply, and "yet" would promise one. The service words why (study/labels.py),
      // as the CLI's `best` does.
      const ended = !live(st.status), why = data.no_recommendation || "no completed trial yet";
      const apply = document.getElementById("apply");
      if (ended) apply?.remove(); else if (apply) apply.hidden = true; // waits for one to export
      if (st.status === "failed" && st.error_message) {
        // A failed study's one reason (study/ending.py) is the page's news: the card says it
        // first and large, in the red of a failure, with where each trial's own reason is.
        document.getElementById("best-title").textContent = "The study failed";
        document.getElementById("best").classList.add("error");
        const reason = st.error_message.trim();
        box.append(node("p", { class: "failure", id: "best-none" }, reason[0].toUpperCase() + reason.slice(1)),
          node("p", { class: "muted" }, "Each trial's own outcome: the table below, or ", node("code", {}, `autotuner trials ${st.id}`)));
        return;
      }
      if (ended) document.getElementById("best-title").textContent = "No recommendation";
      box.append(node("p", { class: ended ? "warn" : "muted", id: "best-none" }, why[0].toUpperCase() + why.slice(1)));
      return;
    }
    const apply = document.getElementById("apply");
    if (apply) apply.hidden = false;
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
    if (r && r.margin_rel < 0) {
      // Recommended on a tie for its reference numerics: the runner-up is the faster one.
      box.append(node("p", { id: "best-margin" }, `Runner-up, trial #${r.trial_number}: `, node("b", {}, r.text)));
    } else if (r) {
      box.append(node("p", { id: "best-margin" }, `Margin over trial #${r.trial_number}: +${(100 * r.margin_rel).toFixed(1)}%, noise ±${(100 * r.noise_rel).toFixed(1)}%: `,
        node("b", {}, r.tie ? "a tie (within noise)" : "beyond noise")));
    }
    if (b.fresh_run && b.fresh_run.text) box.append(node("p", { id: "best-fresh-run" }, "Fresh run: " + b.fresh_run.text));
    if (b.vs_expert_default && b.vs_expert_default.text) box.append(node("p", { id: "best-vs-default" }, "Against the expert default: " + b.vs_expert_default.text));
    if (b.gpu_clock && b.gpu_clock.text) box.append(node("p", { id: "best-clock" }, "GPU clock: " + b.gpu_clock.text));
    if (hr.text) box.append(node("p", { id: "best-memory" }, "Memory: " + hr.text));
    if (b.global_batch && b.global_batch.text) box.append(node("p", { id: "best-batch" }, "Global batch: " + b.global_batch.text));
    // The first run's compile, and for a per-block compile the regions the user's trainer must
    // compile the same way to get the speed measured (`best` prints both).
    const compiled = b.compile || {};
    if (compiled.text) box.append(node("p", { id: "best-compile" }, "Compile time: " + compiled.text + " (not in throughput)"));
    if (compiled.regions) box.append(node("p", { id: "best-compiled" }, "Compiled: " + compiled.regions));
    if (b.input_pipeline && b.input_pipeline.text) box.append(node("p", {}, "Input pipeline: " + b.input_pipeline.text));
    if (b.numerics && b.numerics.text) box.append(node("p", {}, "Numerics: " + b.numerics.text));
    if (b.scaling && b.scaling.text) box.append(node("p", {}, "Scaling: " + b.scaling.text));
    // Why the search, the re-measurements or the end checks stopped (`best` prints it as
    // "search"): a time budget's cuts are the reader's to know.
    if (b.stopped) box.append(node("p", { id: "best-search" }, "Search: " + b.stopped));
    if (b.importance && b.importance.length) {
      // The share is each knob's part of the effects beyond noise (search/importance.py); a
      // report stored before carries PED-ANOVA's (`importance_raw`), which ranked by where the
      // sampler went, not by the effects its text states: shown without it.
      const imp = node("table", { class: "kv", id: "importance" });
      for (const row of b.importance) {
        const share = row.importance_raw === undefined && !missing(row.importance) ? fmt.pct(row.importance) : "";
        imp.append(node("tr", {}, node("th", {}, row.knob), node("td", { class: "num share" }, share), node("td", {}, row.text || "")));
      }
      box.append(node("h3", {}, "Knob importance ", node("small", {}, "(each knob's share of the measured effects beyond noise)")), imp);
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
    // A study with trials but none measured (all failed or not run): say why the axes are empty.
    const none = p.measured === 0 && data.study.trials_total > 0;
    document.getElementById("progress-note").textContent = none ? "(no trial measured a throughput: nothing to draw)"
      : p.shown < p.measured
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
    // Past one trial per cell of its grid (charts.py pareto_points), the chart draws the front and one
    // trial per cell: said, as the progress chart says its buckets.
    const shown = p.front.length + p.others.length;
    document.getElementById("pareto-note").textContent = shown < p.measured
      ? `(${p.measured.toLocaleString("en-US")} measured; the front and one trial per cell of a ${p.grid} × ${p.grid} grid shown)` : "";
  }

  // One strip plot per knob: each value's measured trials (tokens/s, spread sideways so they
  // don't overlap; a quantile sample past 150 per value), its median as a bar, and its failures
  // as a red cross at 0 with their count. charts.py knob_strips has the data.
  // `text` cut (with an ellipsis) to `room` pixels in `scale`'s tick font.
  function fit(scale, text, room) {
    const ctx = scale.ctx;
    ctx.save();
    ctx.font = Chart.helpers.toFont(scale.options.ticks.font).string;
    let shown = text;
    while (shown.length > 2 && ctx.measureText(shown === text ? shown : shown + "…").width > room) shown = shown.slice(0, -1);
    ctx.restore();
    return shown === text ? text : shown + "…";
  }

  function drawStrips(strips) {
    const box = document.getElementById("effects");
    const c = window.autotuner.colors;
    for (const [knob, strip] of Object.entries(strips)) {
      const id = "effect-" + knob;
      // A knob of many values (micro-batch: 10) gets two columns of the grid: in one, its
      // labels had some 30 px each.
      const wide = strip.values.length > 6;
      const cls = wide ? "strip wide" : "strip";
      if (!document.getElementById(id)) box.append(node("div", { class: cls }, node("h3", {}, knob), node("canvas", { id })));
      const points = [], medians = [], failures = [];
      strip.cells.forEach((cell, i) => {
        const dense = cell.tps.length > 40;
        cell.tps.forEach((y, k) => points.push({ x: i + (((k * 0.618034) % 1) - 0.5) * (dense ? 0.6 : 0.3), y, i }));
        if (cell.median !== null) medians.push({ x: i, y: cell.median, i });
        if (cell.failed) failures.push({ x: i, y: 0, i, n: cell.failed });
      });
      const dots = points.length > 600 ? 1.5 : 2.5;
      upsert(id, {
        type: "scatter",
        data: { datasets: [
          { label: "trial", data: points, backgroundColor: c.okFaint, borderColor: c.ok, pointRadius: dots },
          { label: "median", data: medians, pointStyle: "line", pointRadius: 14, borderWidth: 3, borderColor: c.ink, backgroundColor: c.ink },
          { label: "failed", data: failures, pointStyle: "crossRot", pointRadius: 7, borderWidth: 2, borderColor: c.bad, backgroundColor: c.bad },
        ] },
        options: { animation: false, parsing: false, aspectRatio: wide ? 4 : 2, // as tall as the rest
          plugins: { legend: { display: false }, tooltip: { callbacks: { label: (ctx) => {
            const cell = strip.cells[ctx.raw.i], value = strip.values[ctx.raw.i];
            if (ctx.datasetIndex === 2) return `${knob}=${value}: ${ctx.raw.n} failed`;
            if (ctx.datasetIndex === 1) return `${knob}=${value}: median ${fmt.int(ctx.raw.y)} tokens/s of ${cell.measured}`;
            return `${knob}=${value}: ${fmt.int(ctx.raw.y)} tokens/s`;
          } } } },
          scales: {
            x: { type: "linear", min: -0.5, max: strip.values.length - 0.5, grid: { display: false },
                 afterBuildTicks: (axis) => { axis.ticks = strip.values.map((_, i) => ({ value: i })); },
                 // Lines, level: the value, its measured count, its failures. On one line
                 // four values' labels ran into each other in a quarter-width strip, and at
                 // 10,000 trials "1234, 56✗" ran into its neighbour: counts are short (1.2k)
                 // and the failures get a line of their own.
                 // A value's name is cut to its share of the strip's width, measured in the
                 // ticks' font (less the y axis and a gap): "fp8-tensorwise" beside
                 // "fp8-rowwise" ran into it in a quarter-width strip. All of it is in the
                 // tooltip.
                 ticks: { autoSkip: false, maxRotation: 0, callback: function (v) {
                   const cell = strip.cells[v];
                   if (!cell) return "";
                   // The y axis's own width where the layout has measured it (its labels'
                   // width depends on the font: DejaVu's digits took more than 70 px).
                   const axis = Math.max(70, (this.chart.scales.y && this.chart.scales.y.width) || 0);
                   const room = (this.chart.width - axis) / strip.values.length - 12;
                   const lines = [fit(this, String(strip.values[v]), room), fmt.count(cell.measured)];
                   if (cell.failed) lines.push(`${fmt.count(cell.failed)}✗`);
                   return lines;
                 } } },
            y: { title: { display: true, text: "tokens/s" }, beginAtZero: true },
          } },
      });
    }
  }

  function drawCharts(c) {
    drawProgress(c.progress); drawPareto(c.pareto); drawStrips(c.strips);
    document.body.dataset.charts = String(Object.keys(charts).length); // for browser tests
  }

  // ------------------------------------------------------------------ the trials table
  // One line per trial: the error is cut to the cell's width, all of it in the tooltip.
  function errorCell(t) {
    // The class once: a message that already starts with it ("dominated: ...") is shown as
    // it is, as the CLI's trial_note does (cli/render.py).
    const msg = (t.error_message || "").trim();
    const text = t.error_class
      ? (msg.toLowerCase().startsWith(t.error_class.toLowerCase() + ":") ? msg : `${t.error_class}: ${msg}`)
      : t.tight ? `tight: ${fmt.pct(t.memory_free_rel)} of the GPU memory free, less than the headroom` : "";
    // Why a trial was pruned is no error: shown grey (td.why), not red.
    const cls = t.state === "pruned" ? "why" : "err";
    return node("td", { class: cls, title: text }, text.length > 160 ? text.slice(0, 160) + "…" : text);
  }

  function row(t) {
    const state = node("td", {}, node("span", { class: "state " + label(t) }, label(t)));
    // A re-measurement or an end check re-runs a config a row above shows: it says what for
    // (labels.py purpose_tag), else it reads as a duplicate.
    const tag = label(t) === "proxy" ? "" : PURPOSES[t.purpose] || "";
    if (tag) state.append(" ", node("span", { class: "purpose" }, tag));
    if (t.retry_of !== null) state.append(" ", node("small", {}, `(retry of #${t.retry_of})`));
    const spreadText = window.autotuner.spread(t);
    const spread = spreadText === window.autotuner.SINGLE_REPEAT
      ? node("small", { class: "single", title: "one timed repeat: no spread was measured" }, spreadText) : spreadText;
    const cells = [
      // The measurements first (as optuna-dashboard and W&B do): a wide space's knobs scroll.
      node("td", {}, node("a", { href: `${base}/trials/${t.number}` }, t.number)), state,
      node("td", { class: "num" }, t.tokens_per_s ? fmt.int(t.tokens_per_s)
        : PARITY_RUNS.includes(t.purpose) ? node("small", { class: "muted", title: "a numerics check's parity run: no throughput measured" }, "parity run") : ""),
      node("td", { class: "num" }, spread),
      node("td", { class: "num" }, t.mfu === null ? "" : fmt.pct(t.mfu)),
      node("td", { class: "num" }, t.peak_mem_gib === null ? "" : fmt.fixed(t.peak_mem_gib, 2)),
      // No compile time for a measured trial: it ran eager (as the trial page says).
      node("td", { class: "num" }, t.compile_s ? fmt.fixed(t.compile_s, 1) : t.state === "complete" && t.tokens_per_s ? node("small", { class: "muted" }, "eager") : ""),
      node("td", { class: "num" }, t.global_batch_tokens ? fmt.int(t.global_batch_tokens) : ""),
      ...data.knobs.map((k) => node("td", {}, t.params[k] === undefined ? "" : t.params[k])),
      errorCell(t),
    ];
    return node("tr", { class: t.state, "data-number": t.number }, ...cells);
  }

  // The table's view: the sort, its order and the filters, read from (and kept in) the page's
  // URL so a link shows the same rows. The newest page in number order is the live one, drawn
  // from the trials the poll keeps; any other page (older, sorted or filtered) is fetched from
  // /trial-rows, which sorts and filters in SQL, and fetched again when a poll brings news.
  const base = window.location.pathname.replace(/\/$/, "");
  const filterNames = ["state", "error_class", ...data.knobs];
  const view = { sort: "number", order: "desc", filters: {} };
  {
    const q = new URLSearchParams(window.location.search);
    if (q.get("sort")) { view.sort = q.get("sort"); view.order = q.get("order") === "asc" ? "asc" : "desc"; }
    for (const k of filterNames) if (q.get(k)) view.filters[k] = q.get(k);
  }
  let fetched = null; // { rows, total } of the page shown when it is not the live one
  let tableError = "";
  const filtered = () => Object.keys(view.filters).length > 0;
  const livePage = () => pageIndex === 0 && view.sort === "number" && view.order === "desc" && !filtered();

  function viewParams() {
    const p = new URLSearchParams({ sort: view.sort, order: view.order });
    for (const [k, v] of Object.entries(view.filters)) p.append(k, v);
    return p;
  }

  function pageParams() {
    const p = viewParams();
    p.set("offset", String(pageIndex * data.page_size));
    p.set("limit", String(data.page_size));
    return p;
  }

  async function fetchPage() {
    const p = pageParams();
    const asked = p.toString();
    try {
      const resp = await fetch(`${base}/trial-rows?${p}`);
      if (!resp.ok) {
        tableError = (await resp.json()).detail || `the server answered ${resp.status}`;
        fetched = { rows: [], total: 0, asked };
      } else {
        tableError = "";
        fetched = { rows: await resp.json(), total: Number(resp.headers.get("X-Total-Count") || 0), asked };
      }
    } catch (e) { return; } // the service may be restarting: the next poll fetches again
    drawTable();
  }

  function drawTable() {
    if (!document.getElementById("trials-card")) return; // a study with no trial has none
    const size = data.page_size;
    let rows, total;
    if (livePage()) {
      rows = [...known.values()].sort((a, b) => b.number - a.number).slice(0, size);
      total = data.study.trials_total;
    } else if (fetched && fetched.asked === pageParams().toString()) {
      ({ rows, total } = fetched);
    } else return; // being fetched: the rows shown stay until the new ones arrive
    const pages = Math.max(1, Math.ceil(total / size));
    document.querySelector("#trials tbody").replaceChildren(...rows.map(row));
    const first = pageIndex * size;
    const order = view.sort === "number" && view.order === "desc" ? "newest first"
      : `by ${view.sort} ${view.order === "desc" ? "↓" : "↑"}`;
    document.getElementById("pager-text").textContent = tableError ? `(${tableError})`
      : total ? `(${(first + 1).toLocaleString("en-US")}–${(first + rows.length).toLocaleString("en-US")} of ${total.toLocaleString("en-US")}${filtered() ? " matching" : ""}, ${order}; page ${pageIndex + 1} of ${pages})`
      : filtered() ? "(no trial matches these filters)" : "";
    document.getElementById("page-newer").disabled = pageIndex === 0;
    document.getElementById("page-older").disabled = pageIndex >= pages - 1;
    for (const th of document.querySelectorAll("#trials th[data-sort]")) {
      th.classList.toggle("sorted", th.dataset.sort === view.sort);
      th.classList.toggle("desc", th.dataset.sort === view.sort && view.order === "desc");
    }
    const p = viewParams();
    document.getElementById("download-csv").href = `${base}/trials.csv?${p}`;
    document.getElementById("download-json").href = `${base}/trials.json?${p}`;
    document.body.dataset.tableRows = String(rows.length); // for browser tests: what is drawn
    document.body.dataset.tableView = `${p}&page=${pageIndex}`;
  }

  async function showPage(index) {
    pageIndex = Math.max(0, index);
    if (livePage()) { fetched = null; tableError = ""; drawTable(); } else await fetchPage();
  }

  function setView() {
    const p = viewParams();
    if (view.sort === "number" && view.order === "desc") { p.delete("sort"); p.delete("order"); }
    const query = p.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
    showPage(0);
  }

  // A header sorts by its column (numbers descending first, names ascending), again reverses.
  const ascendingFirst = new Set(["state", "error_class", ...data.knobs]);
  for (const th of document.querySelectorAll("#trials th[data-sort]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.sort;
      if (view.sort === key) view.order = view.order === "desc" ? "asc" : "desc";
      else { view.sort = key; view.order = ascendingFirst.has(key) ? "asc" : "desc"; }
      setView();
    });
  }
  const filterForm = document.getElementById("filters");
  for (const [k, v] of Object.entries(view.filters)) {
    const input = filterForm.elements[k];
    if (!input) continue;
    // A link's value the list lacks (state=failed,lost): offered, so the bar shows what is on.
    if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === v)) input.append(node("option", {}, v));
    input.value = v;
  }
  function readFilters() {
    view.filters = {};
    for (const k of filterNames) {
      const input = filterForm.elements[k];
      if (input && input.value !== "") view.filters[k] = input.value;
    }
    setView();
  }
  filterForm.addEventListener("change", readFilters);
  filterForm.addEventListener("submit", (e) => { e.preventDefault(); readFilters(); });
  filterForm.addEventListener("reset", () => setTimeout(readFilters, 0)); // after the fields clear
  document.getElementById("page-newer").addEventListener("click", () => showPage(pageIndex - 1));
  document.getElementById("page-older").addEventListener("click", () => showPage(pageIndex + 1));

  // ------------------------------------------------------------------ live
  // An ended study that measured nothing: no chart (empty axes said nothing the card above does
  // not), and no trials table where it has no trial. Removed for good: such a page is not live.
  function dropEmptyParts() {
    const st = data.study;
    if (live(st.status)) return false;
    const nothing = !data.charts || data.charts.progress.measured === 0;
    if (nothing) for (const id of ["charts", "effects-card"]) document.getElementById(id)?.remove();
    if (st.trials_total === 0) document.getElementById("trials-card")?.remove();
    return nothing;
  }

  function drawAll() {
    drawStatus(data.study); drawBest(data.best, data.unfinished);
    const noCharts = dropEmptyParts();
    drawTable();
    if (noCharts) document.body.dataset.charts = "0"; // for browser tests: drawn, with none
    else if (data.charts) drawCharts(data.charts);
    document.body.dataset.trials = String(data.study.trials_total); // for browser tests
  }
  drawAll();
  if (!livePage()) fetchPage(); // a link with a sort or filters
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
        const news = d.study.trials_total !== data.study.trials_total || d.study.trials_finished !== data.study.trials_finished;
        data.study = d.study; data.best = d.best; data.unfinished = d.unfinished; data.no_recommendation = d.no_recommendation;
        if (d.charts) { data.charts = d.charts; data.charts_at = d.charts_at; }
        drawAll();
        if (news && !livePage()) fetchPage();
      }
    } catch (e) { /* the service may be restarting; try again next tick */ }
    if (live(data.study.status)) setTimeout(poll, POLL_MS);
  }
  if (live(data.study.status)) setTimeout(poll, POLL_MS);

  // ------------------------------------------------------------------ the studies list
  // The list is the server's rendering of this page's address (its filters included), fetched
  // again every few seconds and whenever a filter changes; only #studies-list is swapped, so
  // the filter bar (and a search being typed) stays. The filters live in the address
  // (replaceState), so a filtered view can be bookmarked and survives the refresh. The studies
  // ticked for comparison survive it too; the button needs exactly two.
  function liveStudiesList() {
    const form = document.getElementById("study-filters");
    const ticked = () => [...document.querySelectorAll("input[name=pick]:checked")].map((e) => e.value);
    function drawCompare() {
      const button = document.getElementById("compare-button");
      if (!button) return;
      const n = ticked().length;
      button.disabled = n !== 2;
      document.getElementById("compare-hint").textContent = n === 2 ? "" : `tick two studies to compare them side by side (${n} ticked)`;
    }
    let asked = 0; // the newest fetch: an older answer that arrives late is dropped
    async function refresh() {
      const n = ++asked;
      const search = window.location.search;
      try {
        // A 400 (a bad filter in a hand-edited address) is drawn too: it says what was wrong.
        const resp = await fetch(window.location.pathname + search, { headers: { Accept: "text/html" } });
        const page = new DOMParser().parseFromString(await resp.text(), "text/html");
        const fresh = page.getElementById("studies-list");
        if (!fresh || n !== asked) return;
        const keep = new Set(ticked());
        for (const box of fresh.querySelectorAll("input[name=pick]")) box.checked = keep.has(box.value);
        document.getElementById("studies-list").replaceWith(fresh);
        drawCompare();
        document.body.dataset.studiesView = search; // for browser tests: what is drawn
      } catch (e) { /* the service may be restarting: try again next tick */ }
    }
    function applyFilters() {
      const p = new URLSearchParams();
      for (const input of form.elements) {
        const value = input.name ? input.value.trim() : "";
        if (value) p.set(input.name, value);
      }
      const query = p.toString();
      window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
      document.getElementById("clear-filters").hidden = !query;
      refresh();
    }
    if (form) {
      form.addEventListener("change", applyFilters);
      form.addEventListener("submit", (e) => { e.preventDefault(); applyFilters(); });
      let typing = null; // search as one types, once a pause says the word is there
      form.elements.q.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(applyFilters, 300); });
      document.getElementById("clear-filters").addEventListener("click", (e) => {
        e.preventDefault();
        for (const input of form.elements) if (input.name) input.value = "";
        applyFilters();
      });
    }
    document.addEventListener("change", (e) => { if (e.target.name === "pick") drawCompare(); });
    drawCompare();
    document.body.dataset.studiesView = window.location.search;
    setInterval(refresh, POLL_MS);
  }
})();
