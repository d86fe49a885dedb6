// The console's own script, and all of it: reload a page that asks for it
// (<body data-refresh="seconds">) while its "refresh" box is ticked, the tab
// is visible and nobody is typing in a form. Pages work without it.
(function () {
  "use strict";
  var seconds = Number(document.body.getAttribute("data-refresh"));
  if (!seconds) return;
  var box = document.getElementById("auto-refresh");
  var key = "wf-console-refresh";
  if (box) {
    box.checked = window.localStorage.getItem(key) !== "off";
    box.addEventListener("change", function () {
      window.localStorage.setItem(key, box.checked ? "on" : "off");
    });
  }
  window.setInterval(function () {
    var active = document.activeElement;
    var typing = active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName) && active !== box;
    if (box && !box.checked) return;
    if (document.hidden || typing) return;
    window.location.reload();
  }, seconds * 1000);
})();
