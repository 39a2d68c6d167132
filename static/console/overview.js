/* The overview's charts and live figures (templates/console/overview.html).
 *
 * Fetches /console/overview.json (the URL is #overview's data-url) on load, draws four
 * Chart.js charts once, and on every `halfmoon:transaction` or `halfmoon:resync` event
 * (dispatched on document by live.js) fetches it again, at most once a second, updating the
 * charts in place (chart.update, no re-creation) and the tiles and tables. A slow timer
 * refreshes it too, as the last hour moves on without any event.
 * Texts (durations, times) come ready-made in the JSON: the server owns their wording. */
(function () {
  "use strict";

  var root = document.getElementById("overview");
  if (!root) return;
  var url = root.dataset.url;
  var MIN_INTERVAL_MS = 1000;
  var IDLE_REFRESH_MS = 30000;
  var charts = {};
  var lastFetch = 0;
  var timer = null;
  var inFlight = false;
  var again = false;

  function minuteLabel(ms) {
    return new Date(ms).toISOString().slice(11, 16);
  }

  function seconds(ms) {
    return Math.round(ms / 10) / 100;
  }

  function chartMake(id, config) {
    var canvas = document.getElementById(id);
    if (!canvas || typeof window.Chart === "undefined") return null;
    config.options = Object.assign(
      { responsive: true, maintainAspectRatio: false, animation: false },
      config.options || {}
    );
    return new window.Chart(canvas, config);
  }

  function chartSet(chart, labels, series) {
    if (!chart) return;
    chart.data.labels = labels;
    series.forEach(function (data, i) {
      chart.data.datasets[i].data = data;
    });
    chart.update("none");
  }

  function chartsEnsure(data) {
    if (charts.pending !== undefined) return;
    charts.pending = chartMake("chart-pending", {
      type: "line",
      data: { labels: [], datasets: [{ label: "pending", data: [], pointRadius: 0, fill: true }] },
      options: { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
    charts.ends = chartMake("chart-ends", {
      type: "bar",
      data: {
        labels: [],
        datasets: [
          { label: "commits", data: [] },
          { label: "rollbacks", data: [] },
          { label: "discards", data: [] },
        ],
      },
      options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } } },
    });
    charts.checks = chartMake("chart-checks", {
      type: "bar",
      data: { labels: [], datasets: [{ label: "pending transactions", data: [] }] },
      options: {
        scales: {
          x: { title: { display: true, text: "checks delivered" } },
          y: { beginAtZero: true, ticks: { precision: 0 } },
        },
      },
    });
    charts.latency = chartMake("chart-latency", {
      type: "bar",
      data: {
        labels: [],
        datasets: [
          { label: "p50 (s)", data: [] },
          { label: "p95 (s)", data: [] },
          { label: "p99 (s)", data: [] },
        ],
      },
      options: { scales: { y: { beginAtZero: true, title: { display: true, text: "seconds" } } } },
    });
  }

  function text(id, value) {
    var el = document.getElementById(id);
    if (el) el.textContent = value;
  }

  function cell(tag, content, className) {
    var el = document.createElement(tag);
    if (content instanceof Node) el.appendChild(content);
    else el.textContent = content == null ? "" : String(content);
    if (className) el.className = className;
    if (tag === "th") el.scope = "row";
    return el;
  }

  function timeEl(iso, label) {
    if (!iso) return "";
    var t = document.createElement("time");
    t.dateTime = iso;
    t.title = iso;
    t.textContent = label || iso;
    return t;
  }

  function tableFill(id, rows, emptyText, columns, rowCells) {
    var body = document.querySelector("#" + id + " tbody");
    if (!body) return;
    var fresh = document.createDocumentFragment();
    if (!rows.length) {
      var tr = document.createElement("tr");
      tr.className = "empty";
      var td = cell("td", emptyText);
      td.colSpan = columns;
      tr.appendChild(td);
      fresh.appendChild(tr);
    }
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      rowCells(row).forEach(function (c) { tr.appendChild(c); });
      fresh.appendChild(tr);
    });
    body.replaceChildren(fresh);
  }

  function render(data) {
    chartsEnsure(data);
    var minutes = data.minutes.map(minuteLabel);
    chartSet(charts.pending, minutes, [data.pending_over_time]);
    chartSet(charts.ends, minutes, [data.commits, data.rollbacks, data.discards]);
    chartSet(
      charts.checks,
      data.check_histogram.map(function (_, k) { return String(k); }),
      [data.check_histogram]
    );
    chartSet(
      charts.latency,
      data.latency.map(function (r) { return r.producer_group; }),
      ["p50_ms", "p95_ms", "p99_ms"].map(function (p) {
        return data.latency.map(function (r) { return seconds(r[p]); });
      })
    );

    text("tile-pending", data.pending_now);
    text("tile-discarded", data.discarded_now);
    text("tile-unreachable", data.unreachable.length);
    text("tile-oldest", data.oldest_pending_age_ms_text || "–");
    var now = document.getElementById("ov-now");
    if (now) { now.dateTime = data.now_iso; now.textContent = data.now_iso; }

    tableFill("latency-table", data.latency, "No transaction resolved in the last hour.", 5, function (r) {
      return [
        cell("th", r.producer_group), cell("td", r.count, "num"),
        cell("td", r.p50_ms_text, "num"), cell("td", r.p95_ms_text, "num"), cell("td", r.p99_ms_text, "num"),
      ];
    });
    tableFill("unreachable-table", data.unreachable, "Every producer group is reachable.", 6, function (g) {
      return [
        cell("th", g.name),
        cell("td", timeEl(g.unreachable_since_iso, g.unreachable_since_text)),
        cell("td", g.last_check_error),
        cell("td", g.check_failures, "num"),
        cell("td", timeEl(g.check_backoff_until_iso, g.check_backoff_until_text)),
        cell("td", g.pending, "num"),
      ];
    });
    tableFill("oldest-table", data.oldest_pending, "Nothing pending.", 7, function (r) {
      var link = document.createElement("a");
      link.href = r.url;
      var code = document.createElement("code");
      code.textContent = r.transaction_id;
      link.appendChild(code);
      return [
        cell("th", r.producer_group), cell("td", r.pending, "num"), cell("td", link),
        cell("td", r.topic), cell("td", timeEl(r.born_timestamp_iso)),
        cell("td", r.age_ms_text, "num"), cell("td", r.check_times + " / " + data.check_max, "num"),
      ];
    });
  }

  function load() {
    timer = null;
    if (inFlight) { again = true; return; }
    inFlight = true;
    lastFetch = Date.now();
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("overview.json answered " + response.status);
        return response.json();
      })
      .then(render)
      .catch(function (error) { console.warn(error); })
      .finally(function () {
        inFlight = false;
        if (again) { again = false; schedule(); }
      });
  }

  // At most one fetch a second: the first change fetches at once (or a second after the
  // previous fetch), the changes in between ride along with it.
  function schedule() {
    if (timer !== null) return;
    if (inFlight) { again = true; return; }
    var wait = Math.max(0, lastFetch + MIN_INTERVAL_MS - Date.now());
    timer = window.setTimeout(load, wait);
  }

  document.addEventListener("halfmoon:transaction", schedule);
  document.addEventListener("halfmoon:resync", schedule);
  window.setInterval(function () {
    var paused = window.HalfmoonLive && window.HalfmoonLive.paused;
    if (!paused && Date.now() - lastFetch >= IDLE_REFRESH_MS) schedule();
  }, IDLE_REFRESH_MS / 3);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", load);
  else load();
})();
