// htmx configuration for a strict Content Security Policy, and visible errors.
// Loaded right after htmx.min.js without `defer`: htmx reads its config on DOMContentLoaded.
(function () {
  "use strict";
  if (!window.htmx) {
    return;
  }
  // No eval (CSP has no 'unsafe-eval'), no <style> injected by htmx (no 'unsafe-inline');
  // app.css styles the request indicators instead.
  htmx.config.allowEval = false;
  htmx.config.allowScriptTags = false;
  htmx.config.includeIndicatorStyles = false;
  htmx.config.selfRequestsOnly = true;
  // Back and Forward load the page itself, as a browser would: no snapshot kept in localStorage
  // (fleet figures stay out of it), and no restore that swaps a fetched page in by script.
  htmx.config.historyCacheSize = 0;
  htmx.config.refreshOnHistoryMiss = true;

  function showError(text) {
    var box = document.getElementById("htmx-error");
    if (!box) {
      return;
    }
    box.querySelector("[data-error-text]").textContent = text;
    box.hidden = false;
    box.focus();
  }

  var STATUS_WORDS = {
    400: "The request was refused as invalid.",
    403: "You are not allowed to do this. Ask an admin if you need it.",
    404: "That no longer exists; reload the page.",
    405: "That action is not available here.",
  };

  // htmx does not swap 4xx/5xx responses, so without this a refused click would do nothing visible.
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr.status;
    var words = STATUS_WORDS[status] || (status >= 500 ? "The server failed to answer; try again in a moment." : "The request failed.");
    showError(words + " (HTTP " + status + ")");
  });
  document.addEventListener("htmx:sendError", function () {
    showError("The dashboard cannot be reached. Check your connection; the page will catch up when it is back.");
  });

  document.addEventListener("click", function (event) {
    var close = event.target.closest("[data-dismiss-error]");
    if (close) {
      document.getElementById("htmx-error").hidden = true;
    }
  });
})();
