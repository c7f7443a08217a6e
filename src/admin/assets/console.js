// The operator console's only script (served from the binary): refreshes the live section of
// a page (an element with data-src) every two seconds with the server's HTML for it. Pages work
// without it; it only saves the reload.
(function () {
  "use strict";
  var live = document.querySelector("[data-src]");
  if (!live) { return; }
  var url = live.getAttribute("data-src");
  function refresh() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
          live.classList.remove("stale");
          live.setAttribute("data-updated", new Date().toISOString());
        }
        else { live.classList.add("stale"); }
      })
      .catch(function () { live.classList.add("stale"); })
      .finally(function () { window.setTimeout(refresh, 2000); });
  }
  window.setTimeout(refresh, 2000);
})();
