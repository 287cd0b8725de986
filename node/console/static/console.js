// raftmq console: live refresh only. Pages are complete without this file; every few seconds it re-fetches
// the page and swaps in the fresh version of each element marked data-live (tables, cards, SVG charts).
(function () {
  "use strict";
  var PERIOD_MS = 3000;
  var toggle = document.getElementById("live-toggle");
  var KEY = "raftmq-console-live";
  if (toggle) {
    toggle.checked = window.localStorage.getItem(KEY) !== "off";
    toggle.addEventListener("change", function () {
      window.localStorage.setItem(KEY, toggle.checked ? "on" : "off");
    });
  }
  if (!document.querySelector("[data-live][id]")) {
    if (toggle) { toggle.parentNode.classList.add("hidden"); }
    return;
  }
  var busy = false;
  function refresh() {
    if (busy || (toggle && !toggle.checked) || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        fresh.querySelectorAll("[data-live][id]").forEach(function (el) {
          var old = document.getElementById(el.id);
          if (old) { old.replaceWith(document.importNode(el, true)); }
        });
        document.body.classList.remove("stale");
      })
      .catch(function () { document.body.classList.add("stale"); })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, PERIOD_MS);
})();
