/* A reconciliation run's charts (templates/console/reconciliation/detail.html).
 *
 * Reads the run's analytics series from the page (#run-charts, Django's json_script of
 * broker.selectors_reconciliation.RunCharts.as_json) and draws three Chart.js charts, once:
 * final states per hour (stacked bars), the resolution latency p50/p95/p99 per hour of the
 * producer group and topic chosen in #latency-series (redrawn in place on change), and the
 * discard rate per hour. A run's figures never change, so nothing is fetched again. */
(function () {
  "use strict";

  var source = document.getElementById("run-charts");
  if (!source || typeof window.Chart === "undefined") return;
  var data = JSON.parse(source.textContent);

  function hourLabel(ms) {
    var iso = new Date(ms).toISOString();
    return iso.slice(5, 10) + " " + iso.slice(11, 13) + ":00";
  }

  function seconds(ms) {
    return ms == null ? null : Math.round(ms / 10) / 100;
  }

  function chartMake(id, config) {
    var canvas = document.getElementById(id);
    if (!canvas) return null;
    config.options = Object.assign(
      { responsive: true, maintainAspectRatio: false, animation: false },
      config.options || {}
    );
    return new window.Chart(canvas, config);
  }

  var hours = data.hours.map(hourLabel);

  chartMake("chart-states", {
    type: "bar",
    data: {
      labels: hours,
      datasets: [
        { label: "committed", data: data.committed },
        { label: "rolled back", data: data.rolled_back },
        { label: "discarded", data: data.discarded },
        { label: "pending", data: data.pending },
      ],
    },
    options: {
      scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } },
    },
  });

  function latencySets(series) {
    return ["p50_ms", "p95_ms", "p99_ms"].map(function (p) {
      return { label: p.slice(0, 3) + " (s)", data: series ? series[p].map(seconds) : [], spanGaps: true };
    });
  }

  var latency = chartMake("chart-latency", {
    type: "line",
    data: { labels: hours, datasets: latencySets(data.latency[0]) },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "seconds" } } } },
  });

  var select = document.getElementById("latency-series");
  if (select && latency) {
    select.addEventListener("change", function () {
      var series = data.latency[Number(select.value)];
      latencySets(series).forEach(function (set, i) {
        latency.data.datasets[i].data = set.data;
      });
      latency.update("none");
    });
  }

  chartMake("chart-discards", {
    type: "line",
    data: {
      labels: hours,
      datasets: [{ label: "discard rate (%)", data: data.discard_rate.map(function (r) { return Math.round(r * 10000) / 100; }) }],
    },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "%" } } } },
  });
})();
