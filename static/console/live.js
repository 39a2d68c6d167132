/* Halfmoon console: the page's one live connection (vanilla JS, no build step).
 *
 * Opens one websocket per page to `document.body.dataset.wsUrl` (ws: or wss: as the page's
 * scheme; no data-ws-url, no socket), served by console/consumers.py, which sends JSON
 * `{"stream": "transaction", kind, transaction_id, producer_group, topic, state,
 * check_times, timestamp}` and `{"stream": "bulk", bulk_id, action, state, total,
 * processed, counts, timestamp}`.
 *
 * Dispatches CustomEvents on `document` (`detail` = the payload):
 *   halfmoon:transaction  one per transaction event (not while paused: those are counted)
 *   halfmoon:bulk         one per bulk-action progress event (also while paused)
 *   halfmoon:resync       events may have been missed: on every open of the socket (the first
 *                         covers the gap between the page's render and the socket joining;
 *                         later ones a reconnect), and once on resume from a pause; pages
 *                         reload their data
 *   halfmoon:status       detail {state, missed}: state connecting | live | reconnecting |
 *                         paused | refused
 *
 * `window.HalfmoonLive = {setPaused(bool), paused, state}`.
 * The status text goes into `#live-status` (its data-state is the state, for styling).
 * Reconnects with backoff: 1 s, doubling up to 15 s, back to 1 s once connected. A refusal
 * (close code 4401 signed out, 4403 no view permission) is final: no reconnect.
 */
(function () {
  "use strict";

  var MIN_DELAY_MS = 1000;
  var MAX_DELAY_MS = 15000;
  var REFUSED = { 4401: "signed out", 4403: "no access" };

  var socket = null;
  var delay = MIN_DELAY_MS;
  var timer = null;
  var everOpen = false; // an open after this one is a reconnect
  var connected = false;
  var refused = null;
  var leaving = false;
  var paused = false;
  var missed = 0;

  function emit(name, detail) {
    document.dispatchEvent(new CustomEvent(name, { detail: detail }));
  }

  function state() {
    if (refused) return "refused";
    if (paused) return "paused";
    if (connected) return "live";
    return everOpen || timer ? "reconnecting" : "connecting";
  }

  function render() {
    var s = state();
    var text = s === "refused" ? "offline (" + refused + ")"
      : s === "paused" ? (missed ? "paused (" + missed + " new)" : "paused")
      : s === "connecting" ? "connecting…"
      : s;
    if (s === "paused" && !connected && !refused) text += ", reconnecting";
    var el = document.getElementById("live-status");
    if (el) {
      el.textContent = text;
      el.dataset.state = s;
    }
    emit("halfmoon:status", { state: s, missed: missed });
  }

  function socketUrl(path) {
    var url = new URL(path, window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    return url.href;
  }

  function onMessage(message) {
    var payload;
    try {
      payload = JSON.parse(message.data);
    } catch (e) {
      return;
    }
    if (!payload || typeof payload !== "object") return;
    if (payload.stream === "transaction") {
      if (paused) {
        missed += 1;
        render();
      } else {
        emit("halfmoon:transaction", payload);
      }
    } else if (payload.stream === "bulk") {
      emit("halfmoon:bulk", payload);
    }
  }

  function schedule() {
    if (timer || leaving || refused) return;
    timer = window.setTimeout(function () {
      timer = null;
      connect();
    }, delay);
    delay = Math.min(delay * 2, MAX_DELAY_MS);
    render();
  }

  function connect() {
    var path = document.body && document.body.dataset.wsUrl;
    if (!path || leaving) return;
    try {
      socket = new WebSocket(socketUrl(path));
    } catch (e) {
      schedule();
      return;
    }
    socket.addEventListener("open", function () {
      var again = everOpen;
      everOpen = true;
      connected = true;
      delay = MIN_DELAY_MS;
      render();
      // Events sent before the socket joined (between the page's render and now) or while it
      // was down are lost: pages reload (after a pause, the resume resyncs anyway).
      if (!paused) emit("halfmoon:resync", { reason: again ? "reconnect" : "open" });
    });
    socket.addEventListener("message", onMessage);
    socket.addEventListener("close", function (event) {
      connected = false;
      socket = null;
      if (REFUSED[event.code]) {
        refused = REFUSED[event.code];
        render();
        return;
      }
      schedule();
    });
    // An error is followed by close, which schedules the reconnect.
  }

  function setPaused(value) {
    value = Boolean(value);
    if (value === paused) return;
    paused = value;
    var hadMissed = missed;
    missed = 0;
    render();
    if (!paused) emit("halfmoon:resync", { reason: "resume", missed: hadMissed });
  }

  window.HalfmoonLive = {
    setPaused: setPaused,
    get paused() { return paused; },
    get state() { return state(); },
  };

  window.addEventListener("pagehide", function () {
    leaving = true;
    if (timer) window.clearTimeout(timer);
    if (socket) socket.close(1000);
  });
  window.addEventListener("pageshow", function (event) {
    // Back/forward cache: the page comes back without its socket.
    if (event.persisted && leaving) {
      leaving = false;
      everOpen = true;
      connect();
    }
  });

  function start() {
    if (!document.body || !document.body.dataset.wsUrl) return;
    render();
    connect();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
