/* The Gaps page's chart arrives as an SVG string in the chart element's data-svg attribute (Dash has no
   SVG components, and an iframe's document cost a cold page 0.1-0.3 s, issue 28): put it in the element as
   soon as the element is in the page. The string is made by tracelab.render.figures.gaps_svg, every text
   in it XML-escaped. */
(function () {
  function fill(root) {
    var els = root.querySelectorAll ? root.querySelectorAll("[data-svg]") : [];
    for (var i = 0; i < els.length; i++) {
      var el = els[i], svg = el.getAttribute("data-svg");
      if (el.__svg !== svg) { el.__svg = svg; el.innerHTML = svg; }
    }
  }
  new MutationObserver(function (records) {
    for (var i = 0; i < records.length; i++) {
      var r = records[i];
      if (r.type === "attributes") { fill(r.target.parentNode || document); continue; }
      for (var j = 0; j < r.addedNodes.length; j++) {
        var n = r.addedNodes[j];
        if (n.nodeType === 1) { if (n.hasAttribute("data-svg")) { fill(n.parentNode); } else { fill(n); } }
      }
    }
  }).observe(document.documentElement, {childList: true, subtree: true, attributes: true, attributeFilter: ["data-svg"]});
  if (document.body) { fill(document); }
})();
