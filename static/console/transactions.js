/* Halfmoon console: live stuck-transaction list and transaction page.
 *
 * Listens to `halfmoon:transaction` (static/console/live.js dispatches one per broker event,
 * detail {stream, kind, transaction_id, producer_group, topic, state, check_times, timestamp}).
 *
 * List page (#tx-table): for each event, GET /console/transactions/<id>/row/?<current filter>.
 * 200 -> the row's <tr>: it replaces the row on the page, or is inserted in sort order
 * (oldest first: born_timestamp, transaction_id) when its position falls on this page; a
 * row that sorts after this page's last row is inserted only on the last page, one that sorts
 * before the first row only on the first page; otherwise the "N changed outside this page"
 * bar counts it. 204 -> the transaction no longer matches (e.g. committed): its row goes.
 * Changed rows flash briefly. Requests for one transaction are coalesced: while one is in
 * flight, later events for it cause one more request afterwards.
 *
 * "Pause live updates" calls HalfmoonLive.setPaused(true); on `halfmoon:resync` (sent by
 * live.js on each open of its socket and on resume) the table is reloaded with htmx
 * (#tx-table). The operator's selection (the ticked rows, which "Export selected" and a bulk
 * preview submit) outlives it: the ids ticked at htmx:beforeSwap are ticked again at
 * htmx:afterSwap where their rows still are.
 *
 * Transaction page (#tx-detail): an event for this transaction reloads the page's content.
 */
(function () {
  "use strict";

  var rowBase = "/console/transactions/";
  var inFlight = {}; // transaction id -> "busy" | "again"
  var outside = 0;

  function table() { return document.getElementById("tx-table"); }
  function tbody() { return document.getElementById("tx-tbody"); }

  function keyOf(born, id) { return [Number(born), String(id)]; }
  function rowKey(tr) { return keyOf(tr.dataset.born, tr.dataset.transactionId); }
  function cmp(a, b) {
    if (a[0] !== b[0]) return a[0] < b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0;
  }

  function rows() {
    return Array.prototype.slice.call(tbody().querySelectorAll("tr.tx-row"));
  }

  function flash(tr) {
    tr.classList.add("flash");
    setTimeout(function () { tr.classList.remove("flash"); }, 1200);
  }

  function countOutside() {
    outside += 1;
    var bar = document.getElementById("live-new");
    var count = document.getElementById("live-new-count");
    if (bar && count) { count.textContent = String(outside); bar.hidden = false; }
  }

  function dropEmptyNote() {
    var empty = tbody().querySelector("tr.empty");
    if (empty) empty.remove();
  }

  function place(tr) {
    var id = tr.dataset.transactionId;
    var old = document.getElementById("tx-row-" + id);
    if (old) {
      var checked = old.querySelector("input[type=checkbox]");
      var box = tr.querySelector("input[type=checkbox]");
      if (checked && box) box.checked = checked.checked;
      old.replaceWith(tr);
      flash(tr);
      return;
    }
    var all = rows();
    var key = rowKey(tr);
    var t = table();
    var lastPage = t.dataset.isLastPage === "true";
    var firstPage = t.dataset.isFirstPage === "true";
    if (all.length) {
      if (cmp(key, rowKey(all[0])) < 0 && !firstPage) { countOutside(); return; }
      if (cmp(key, rowKey(all[all.length - 1])) > 0 && !lastPage) { countOutside(); return; }
    } else if (!(firstPage && lastPage)) { countOutside(); return; }
    dropEmptyNote();
    var before = null;
    for (var i = 0; i < all.length; i++) {
      if (cmp(key, rowKey(all[i])) < 0) { before = all[i]; break; }
    }
    tbody().insertBefore(tr, before);
    flash(tr);
  }

  function remove(id) {
    var old = document.getElementById("tx-row-" + id);
    if (!old) return;
    old.classList.add("leaving");
    setTimeout(function () { old.remove(); }, 600);
  }

  function refreshRow(id) {
    if (inFlight[id]) { inFlight[id] = "again"; return; }
    inFlight[id] = "busy";
    var query = table().dataset.filterQuery || "";
    var url = rowBase + encodeURIComponent(id) + "/row/" + (query ? "?" + query : "");
    fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        if (response.status === 204) { remove(id); return null; }
        if (!response.ok) return null;
        return response.text();
      })
      .then(function (html) {
        if (!html) return;
        var holder = document.createElement("tbody");
        holder.innerHTML = html.trim();
        var tr = holder.querySelector("tr");
        if (tr) place(tr);
      })
      .catch(function () { /* the next event or resync repairs the row */ })
      .then(function () {
        var again = inFlight[id] === "again";
        delete inFlight[id];
        if (again) refreshRow(id);
      });
  }

  function reloadTable() {
    if (!window.htmx) { window.location.reload(); return; }
    window.htmx.ajax("GET", window.location.href, { target: "#tx-table", swap: "outerHTML" });
    outside = 0;
    var bar = document.getElementById("live-new");
    if (bar) bar.hidden = true;
  }

  function setupPause() {
    var button = document.getElementById("live-pause");
    if (!button) return;
    button.addEventListener("click", function () {
      var live = window.HalfmoonLive;
      var pause = button.getAttribute("aria-pressed") !== "true";
      if (live && typeof live.setPaused === "function") live.setPaused(pause);
      button.setAttribute("aria-pressed", pause ? "true" : "false");
      button.textContent = pause ? "Resume live updates" : "Pause live updates";
    });
  }

  function boxes() {
    return Array.prototype.slice.call(tbody().querySelectorAll("input[name=transaction_id]"));
  }

  // "Select all on this page" is ticked while every row's box is.
  function syncSelectAll() {
    var all = document.getElementById("select-page");
    if (!all) return;
    var mine = boxes();
    all.checked = mine.length > 0 && mine.every(function (box) { return box.checked; });
  }

  function setupSelectAll() {
    document.addEventListener("change", function (event) {
      var target = event.target;
      if (!target) return;
      if (target.id === "select-page") {
        boxes().forEach(function (box) { box.checked = target.checked; });
      } else if (target.name === "transaction_id" && tbody().contains(target)) {
        syncSelectAll();
      }
    });
  }

  // A reload of the table replaces its boxes: carry the ticked ids over (compared by value,
  // never put in a selector: an id may hold "." or ":").
  function setupKeepSelection() {
    var kept = null; // transaction id -> true, between a swap of #tx-table and its end
    document.addEventListener("htmx:beforeSwap", function (event) {
      var d = event.detail || {};
      if (!d.shouldSwap || !d.target || d.target.id !== "tx-table") return;
      kept = Object.create(null);
      boxes().forEach(function (box) { if (box.checked) kept[box.value] = true; });
    });
    document.addEventListener("htmx:afterSwap", function () {
      if (!kept || !tbody()) return;
      var ticked = kept;
      kept = null;
      boxes().forEach(function (box) { box.checked = ticked[box.value] === true; });
      syncSelectAll();
    });
  }

  function setupList() {
    setupPause();
    setupSelectAll();
    setupKeepSelection();
    document.addEventListener("halfmoon:transaction", function (event) {
      var d = event.detail || {};
      if (d.transaction_id && table()) refreshRow(d.transaction_id);
    });
    document.addEventListener("halfmoon:resync", reloadTable);
  }

  function setupDetail(container) {
    var id = container.dataset.transactionId;
    var pending = false;
    function reload() {
      if (pending) return;
      pending = true;
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("tx-detail");
          var current = document.getElementById("tx-detail");
          // Replace only what changed (data-version: state, checks, next check, end, timeline
          // length), and never under an open dialog: a resync that finds nothing new leaves
          // the page, and whatever the operator is doing on it, alone.
          if (fresh && current && fresh.dataset.version !== current.dataset.version) {
            var open = current.querySelector("dialog[open]");
            if (!open) current.replaceWith(fresh);
          }
        })
        .catch(function () {})
        .then(function () { pending = false; });
    }
    document.addEventListener("halfmoon:transaction", function (event) {
      if ((event.detail || {}).transaction_id === id) reload();
    });
    document.addEventListener("halfmoon:resync", reload);
  }

  // The action buttons of a transaction's page open their dialog, and Cancel closes it. One
  // listener on the document: a live update replaces the page's content (#tx-detail), and
  // handlers bound to the old buttons would be lost with them.
  function setupActions() {
    document.addEventListener("click", function (event) {
      var opener = event.target.closest(".actions [data-dialog]");
      if (opener) {
        var dialog = document.getElementById(opener.dataset.dialog);
        if (dialog && !dialog.open) dialog.showModal();
        return;
      }
      var closer = event.target.closest(".actions dialog [data-close]");
      if (closer) closer.closest("dialog").close();
    });
  }

  function start() {
    setupActions();
    if (table()) setupList();
    var detail = document.getElementById("tx-detail");
    if (detail) setupDetail(detail);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
