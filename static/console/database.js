/* Halfmoon console: says on the page when the broker's database does not answer (vanilla JS, no
 * build step).
 *
 * Asks `document.body.dataset.healthzUrl` (/healthz, no token: JSON whose `database` is "ok" or
 * "error: <what failed>", with a 200 or a 503) every UP_POLL_MS while the database answers,
 * every DOWN_POLL_MS while it does not, at once when an htmx request of the page is answered
 * 503 or the page becomes visible again; not while the page is hidden (a background tab costs
 * the broker nothing). One request at a time, each given up after TIMEOUT_MS.
 *
 * While the database is away `#database-banner` (base.html) is shown, with what failed in its
 * `[data-database-error]` and when this page first saw it in its `[data-database-since]`; when
 * it answers again the banner is hidden and `halfmoon:resync` is dispatched on `document`
 * (detail {reason: "database"}), so the page reloads its data as after a reconnect
 * (live.js). On the 503 page (templates/console/error.html, body
 * `data-reload-when-database-back`) the page reloads instead.
 *
 * When /healthz itself does not answer (the web server is down, or a proxy's error page) the
 * banner is left as it was: the live status (live.js) says the page is disconnected.
 */
(function () {
  "use strict";

  var UP_POLL_MS = 5000;
  var DOWN_POLL_MS = 2000;
  var TIMEOUT_MS = 10000;

  var down = false;
  var timer = null;
  var asking = false;

  function url() {
    return document.body && document.body.dataset.healthzUrl;
  }

  function update(database) {
    var banner = document.getElementById("database-banner");
    if (database === "ok") {
      if (!down) return;
      down = false;
      if (document.body.hasAttribute("data-reload-when-database-back")) {
        window.location.reload();
        return;
      }
      if (banner) banner.hidden = true;
      document.dispatchEvent(new CustomEvent("halfmoon:resync", { detail: { reason: "database" } }));
      return;
    }
    var error = database.replace(/^error:\s*/, "");
    if (banner) {
      var what = banner.querySelector("[data-database-error]");
      if (what) what.textContent = error;
      if (!down) {
        var since = banner.querySelector("[data-database-since]");
        if (since) {
          var now = new Date();
          since.textContent = now.toLocaleTimeString();
          since.setAttribute("datetime", now.toISOString());
        }
      }
      banner.hidden = false;
    }
    down = true;
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = window.setTimeout(ask, down ? DOWN_POLL_MS : UP_POLL_MS);
  }

  function ask() {
    window.clearTimeout(timer);
    timer = null;
    if (asking || !url()) return;
    if (document.hidden) return; // visibilitychange asks again
    asking = true;
    var controller = new AbortController();
    var giveUp = window.setTimeout(function () { controller.abort(); }, TIMEOUT_MS);
    fetch(url(), {
      headers: { Accept: "application/json" },
      cache: "no-store",
      credentials: "same-origin",
      signal: controller.signal,
    })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        if (body && typeof body.database === "string") update(body.database);
      })
      .catch(function () { /* no answer from the web server: see the comment on top */ })
      .then(function () {
        window.clearTimeout(giveUp);
        asking = false;
        schedule();
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) ask();
  });
  // A console request refused for want of the database: say so now, not at the next poll.
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail && event.detail.xhr;
    if (xhr && xhr.status === 503) ask();
  });

  window.HalfmoonDatabase = {
    get down() { return down; },
    ask: ask,
  };

  function start() {
    // A console page was just rendered from the database: first ask after a poll's interval.
    // The 503 page was not: it starts down, so the first "ok" reloads it.
    down = document.body.hasAttribute("data-reload-when-database-back");
    schedule();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
