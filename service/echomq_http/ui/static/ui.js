// The dashboard's script (optional: every page reads and every form posts without it).
// Live regions: when the page's event feed reports a change, each region ([data-region]) fetches
// its own fragment again; bursts are merged and at most one fetch per region is in flight, so a
// busy queue never piles up requests. The feed closes while the page is hidden and resumes after
// the last event id it saw when the page shows again. Also: lease countdowns, confirmations, and
// "select all" on the failed list.
(function () {
  "use strict";
  var MERGE_MS = 300;
  var TYPES = ["enqueued", "leased", "progress", "completed", "retrying", "failed", "released", "reclaimed",
    "cancel_requested", "cancelled", "promoted", "deleted", "paused", "resumed", "resync", "changed"];
  var body = document.body;
  var feedUrl = body.getAttribute("data-feed");
  var source = null;
  var lastId = null;
  var timer = null;
  var live = true;
  var busy = {};
  var again = {};

  function regionUrl(name) {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", name);
    return url.toString();
  }

  // A region the user is working in (focus inside, boxes ticked) waits until they leave it.
  function inUse(region) {
    return region.contains(document.activeElement) && document.activeElement !== region ||
      region.querySelector("input[type=checkbox]:checked") !== null;
  }

  function refreshRegion(region) {
    var name = region.getAttribute("data-region");
    if (busy[name]) { again[name] = true; return; }
    if (inUse(region)) { again[name] = true; return; }
    busy[name] = true;
    fetch(regionUrl(name), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html !== null) { region.innerHTML = html; startCountdowns(region); wire(region); }
      })
      .catch(function () { /* the next event or visibility change tries again */ })
      .then(function () {
        busy[name] = false;
        if (again[name]) { again[name] = false; refreshRegion(region); }
      });
  }

  function refreshAll() {
    timer = null;
    document.querySelectorAll("[data-region]").forEach(refreshRegion);
  }

  function changed(event) {
    if (event && event.lastEventId) { lastId = event.lastEventId; }
    if (live && timer === null) { timer = window.setTimeout(refreshAll, MERGE_MS); }
  }

  function open() {
    if (!feedUrl || source !== null || !live) { return; }
    var url = new URL(feedUrl, window.location.href);
    if (lastId !== null) { url.searchParams.set("after", lastId); }
    source = new EventSource(url.toString());
    source.onopen = function () { body.setAttribute("data-live", "open"); };
    TYPES.forEach(function (type) { source.addEventListener(type, changed); });
    source.onerror = function () {
      // EventSource reconnects by itself (sending Last-Event-ID); a closed one is opened again.
      if (source && source.readyState === EventSource.CLOSED) { source = null; window.setTimeout(open, 2000); }
    };
  }

  function close() {
    if (source !== null) { source.close(); source = null; }
    body.setAttribute("data-live", "closed");
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); } else if (live) {
      if (lastId === null) { changed(null); } // no id to resume from: read the regions again
      open();
    }
  });

  document.addEventListener("focusout", function () {
    window.setTimeout(function () {
      document.querySelectorAll("[data-region]").forEach(function (region) {
        var name = region.getAttribute("data-region");
        if (again[name] && !busy[name]) { again[name] = false; refreshRegion(region); }
      });
    }, 0);
  });

  // Countdowns to a lease's end (from the server's figure at render time), red when close.
  var started = new WeakMap();
  function startCountdowns(root) {
    var now = performance.now();
    root.querySelectorAll("[data-remaining-ms], [data-elapsed-ms]").forEach(function (element) {
      started.set(element, now);
    });
  }
  function formatMs(ms) {
    var s = Math.floor(ms / 1000);
    if (s < 60) { return s + " s"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return m + " min " + (s % 60) + " s"; }
    return Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function tick() {
    var now = performance.now();
    document.querySelectorAll("[data-remaining-ms]").forEach(function (element) {
      var remaining = Number(element.getAttribute("data-remaining-ms")) - (now - (started.get(element) || now));
      element.textContent = remaining > 0 ? formatMs(remaining) : "expired";
      element.classList.toggle("soon", remaining <= Number(element.getAttribute("data-soon-ms")));
    });
    document.querySelectorAll("[data-elapsed-ms]").forEach(function (element) {
      element.textContent = formatMs(Number(element.getAttribute("data-elapsed-ms")) + (now - (started.get(element) || now)));
    });
  }

  // Confirmations and "select all", on whatever a region brings in.
  function wire(root) {
    root.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
    var all = root.querySelector("#select-all");
    if (all) {
      all.hidden = false;
      all.addEventListener("change", function () {
        document.querySelectorAll("#retry-selected input[name=id]").forEach(function (box) { box.checked = all.checked; });
      });
    }
  }

  var toggle = document.getElementById("live-toggle");
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      live = !live;
      toggle.setAttribute("aria-pressed", String(live));
      toggle.textContent = live ? "Live" : "Live: off";
      if (live) { changed(null); open(); } else { close(); }
    });
  }

  startCountdowns(document);
  wire(document);
  window.setInterval(tick, 250);
  if (feedUrl) {
    var after = new URL(feedUrl, window.location.href).searchParams.get("after");
    if (after !== null) { lastId = after; }
    open();
  }
})();
