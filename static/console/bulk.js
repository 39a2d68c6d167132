// The bulk page's live progress: listens to the `halfmoon:bulk` events that live.js
// dispatches for `{"stream": "bulk", bulk_id, state, total, processed, counts}` and updates
// the <progress> and the counts; reloads the page (the report) when the bulk is done.
(function () {
  "use strict";
  var section = document.getElementById("bulk-progress");
  if (!section) return;
  var bulkId = Number(section.dataset.bulkId);
  var reloaded = false;

  function set(id, value) {
    var el = document.getElementById(id);
    if (el) el.textContent = String(value);
  }

  document.addEventListener("halfmoon:bulk", function (event) {
    var d = event.detail || {};
    if (Number(d.bulk_id) !== bulkId) return;
    var counts = d.counts || {};
    var bar = document.getElementById("bulk-bar");
    if (bar) {
      bar.max = d.total;
      bar.value = d.processed;
      bar.textContent = d.processed + " / " + d.total;
    }
    set("bulk-processed", d.processed);
    set("bulk-done", counts.done || 0);
    set("bulk-already-ended", counts.already_ended || 0);
    set("bulk-failed", counts.failed || 0);
    if (d.state === "done" && !reloaded) {
      reloaded = true;
      window.location.reload();
    }
  });

  // Progress published before this page's websocket joined is never sent to it: each time the
  // socket is live (first open, reconnect, resume), ask the server whether the bulk is done.
  function recheck() {
    if (section.dataset.state === "done") return;
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html || reloaded) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("bulk-progress");
        if (fresh && fresh.dataset.state === "done") {
          reloaded = true;
          window.location.reload();
        }
      })
      .catch(function () { /* the next status or progress event tries again */ });
  }
  document.addEventListener("halfmoon:status", function (event) {
    if ((event.detail || {}).state === "live") recheck();
  });
  if (window.HalfmoonLive && window.HalfmoonLive.state === "live") recheck();

})();
