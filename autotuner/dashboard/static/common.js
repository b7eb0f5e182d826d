// Helpers every page's script uses: DOM building, number formatting, the trial label, colours.
// Loaded before the page scripts (base.html); they read them from window.autotuner.
(function () {
  "use strict";
  const missing = (v) => v === null || v === undefined;
  const fmt = {
    int: (v) => (missing(v) ? "" : Math.round(v).toLocaleString("en-US")),
    pct: (v) => (missing(v) ? "n/a" : (100 * v).toFixed(1) + "%"),
    fixed: (v, n) => (missing(v) ? "n/a" : Number(v).toFixed(n)),
    // A count in at most four characters (a strip's label under a value): 950, 1.2k, 12k.
    count: (v) => (v < 1000 ? String(v) : v < 9950 ? (v / 1000).toFixed(1).replace(/\.0$/, "") + "k" : Math.round(v / 1000) + "k"),
    signedPct: (v) => (missing(v) ? "n/a" : (v >= 0 ? "+" : "") + (100 * v).toFixed(1) + "%"),
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
  // study/labels.py spread_text: a single timed repeat has no spread (its min and max are
  // that repeat), so it is not shown as a precise ±0.0%.
  const SINGLE_REPEAT = "1 repeat";
  function spread(t) {
    if (!t.tokens_per_s || missing(t.tokens_per_s_min) || missing(t.tokens_per_s_max)) return "";
    if (t.tokens_per_s_min === t.tokens_per_s_max) return SINGLE_REPEAT;
    return "±" + (100 * (t.tokens_per_s_max - t.tokens_per_s_min) / 2 / t.tokens_per_s).toFixed(1) + "%";
  }
  function minutes(st) { // the time budget spent, as study/labels.py budget_used says it
    if (!st.max_minutes || missing(st.minutes_used)) return "";
    return ` · ${st.minutes_used.toFixed(1)} of ${st.max_minutes} min`;
  }
  const colors = {
    ok: "rgba(37, 99, 235, 0.75)", okFaint: "rgba(37, 99, 235, 0.35)",
    front: "rgba(220, 38, 38, 0.95)", bad: "rgba(185, 28, 28, 0.9)",
    other: "rgba(217, 119, 6, 0.85)", otherFaint: "rgba(217, 119, 6, 0.35)",
    ink: "rgba(17, 24, 39, 0.9)", muted: "rgba(107, 114, 128, 0.8)",
  };
  window.autotuner = { fmt, node, label, minutes, colors, missing, spread, SINGLE_REPEAT };
})();
