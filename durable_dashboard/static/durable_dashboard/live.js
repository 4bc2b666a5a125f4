/* django-durable admin: live pages and copying a run. No build step, no external assets.
 *
 * An element with data-durable-live="N" (seconds) is fetched again every N seconds and replaced by
 * its counterpart in the new page, for as long as the new page still marks it live (something on
 * it is active). A refresh is skipped while the operator is busy with the page: typing in a field,
 * a row selected, or an action form open.
 */
(function () {
  "use strict";

  function busy(root) {
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName) && active.type !== "submit") return true;
    if (document.querySelector("#result_list input.action-select:checked")) return true;
    return !!root.querySelector("details.durable-action-form[open], details.durable-collapse[open]");
  }

  function schedule(id, seconds) {
    window.setTimeout(function () { refresh(id, seconds); }, seconds * 1000);
  }

  function refresh(id, seconds) {
    var root = document.getElementById(id);
    if (!root) return;
    if (busy(root)) { schedule(id, seconds); return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "durable-live" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
        if (!fresh) return;
        root.replaceWith(fresh);
        // The admin's row selection (select all, the counter) binds to the rows it saw at load.
        var rows = fresh.querySelectorAll("tr input.action-select");
        if (rows.length && typeof window.Actions === "function") window.Actions(rows);
        document.dispatchEvent(new CustomEvent("durable:refreshed", { detail: { id: id } }));
        var next = parseFloat(fresh.getAttribute("data-durable-live") || "0");
        if (next > 0) schedule(id, next);
      })
      .catch(function () { schedule(id, seconds * 2); });
  }

  function copyRun(button) {
    var status = document.getElementById("durable-copy-status");
    fetch(button.getAttribute("data-copy-url"), { credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (text) { return navigator.clipboard.writeText(text); })
      .then(function () { if (status) status.textContent = button.getAttribute("data-done") || "Copied."; })
      .catch(function () { if (status) status.textContent = button.getAttribute("data-failed") || "Could not copy."; });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("#durable-copy");
    if (button) copyRun(button);
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-durable-live]").forEach(function (element) {
      var seconds = parseFloat(element.getAttribute("data-durable-live") || "0");
      if (element.id && seconds > 0) schedule(element.id, seconds);
    });
  });
})();
