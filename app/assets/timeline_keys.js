// Timeline keyboard navigation, as in Perfetto: W / S zoom in / out around the mouse (or the centre),
// A / D pan left / right. The new x range is applied at once (Plotly.relayout), so the view moves
// without waiting; the server then sends the detail of the new window (relayoutData -> tl-xrange).
(function () {
  "use strict";
  var ZOOM = 0.6; // W keeps 60 % of the window, S shows 1/0.6 of it
  var PAN = 0.25; // A / D move a quarter of the window
  var mouseFrac = null;

  function graph() {
    return document.querySelector("#tl-graph .js-plotly-plot");
  }

  document.addEventListener("mousemove", function (ev) {
    var gd = graph();
    if (!gd || !gd._fullLayout || !gd._fullLayout.xaxis) { mouseFrac = null; return; }
    var xa = gd._fullLayout.xaxis;
    var box = gd.getBoundingClientRect();
    var px = ev.clientX - box.left - xa._offset;
    mouseFrac = px >= 0 && px <= xa._length ? px / xa._length : null;
  });

  function typing(target) {
    var tag = (target && target.tagName) || "";
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) { return; }
    var key = (ev.key || "").toLowerCase();
    if ("wasd".indexOf(key) < 0 || key === "") { return; }
    var gd = graph();
    if (!gd || !gd._fullLayout || !window.Plotly) { return; }
    var r = gd._fullLayout.xaxis.range.map(Number);
    var w = r[1] - r[0];
    var a = r[0], b = r[1];
    if (key === "w" || key === "s") {
      var f = mouseFrac === null ? 0.5 : mouseFrac;
      var pivot = r[0] + f * w;
      var nw = key === "w" ? w * ZOOM : w / ZOOM;
      a = pivot - f * nw;
      b = a + nw;
    } else {
      var d = (key === "d" ? 1 : -1) * PAN * w;
      a += d;
      b += d;
    }
    ev.preventDefault();
    window.Plotly.relayout(gd, { "xaxis.range": [a, b] });
  });
})();
