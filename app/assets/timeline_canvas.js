// The timeline page's renderer: draws the run on a <canvas> from tiles it keeps in the browser.
//
// The server cuts the run into tiles (level L: 2^L equal windows; /api/timeline/tile, binary: a JSON
// header and typed arrays, see tracelab/render/timeline/data.py). For a window this draws the tiles of the
// level whose tiles are 1-2 windows wide; a tile not here yet is drawn from its nearest coarser
// ancestor (level 0, the whole run, is always fetched first) and fetched. So W/S/A/D, the wheel and
// drag never wait for the server: they redraw at once from what the browser holds, and the detail
// arrives after. The page's Dash callbacks hear about the window, clicks and dragged ranges through
// dash_clientside.set_props (tl-window, tl-click, tl-range-sel), and move or mark the canvas through
// window.tracelabTimeline (app/timeline_callbacks.py).
//
// Names are untrusted: they are drawn with fillText and shown with textContent, never as markup.
(function () {
  "use strict";

  var ZOOM = 0.6; // W keeps 60 % of the window, S shows 1/0.6 of it
  var PAN = 0.25; // A / D move a quarter of the window
  var MIN_SPAN = 1000; // ns
  var AXIS_PX = 30;
  var LABEL_PX = 300;
  var MAX_TILES = 400;
  var CONCURRENT = 2;
  var REPORT_MS = 150;
  var MAX_HEIGHT = 30000;

  // ---- the server ---------------------------------------------------------------------------------

  function base() {
    try {
      var cfg = JSON.parse(document.getElementById("_dash-config").textContent);
      return (cfg.requests_pathname_prefix || "/").replace(/\/$/, "");
    } catch (e) {
      return "";
    }
  }

  function api(path, params) {
    var q = Object.keys(params)
      // an empty `show` (every lane group unticked) is a value, not an absent parameter
      .filter(function (k) { return params[k] !== undefined && params[k] !== null && (params[k] !== "" || k === "show"); })
      .map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]); })
      .join("&");
    return base() + "/api/timeline/" + path + (q ? "?" + q : "");
  }

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) { return r.text().then(function (t) { throw new Error(t.trim() || r.statusText); }); }
      return r.json();
    });
  }

  var TYPES = { f64: Float64Array, f32: Float32Array, i32: Int32Array, u8: Uint8Array };

  function decodeTile(buf) {
    var bytes = new Uint8Array(buf, 0, 4);
    if (String.fromCharCode(bytes[0], bytes[1], bytes[2], bytes[3]) !== "TLT1") { throw new Error("not a tile"); }
    var n = new DataView(buf).getUint32(4, true);
    var header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
    var at = 8 + n;
    var a = {};
    header.arrays.forEach(function (s) { a[s.name] = new TYPES[s.type](buf, at + s.offset, s.length); });
    return { h: header, a: a, n: a["i.start"].length, nb: a["b.start"].length, ng: a["g.start"].length };
  }

  // tiles of every run, shared by the early prefetch and the page (key: run|show|level|index)
  var tiles = new Map();

  function tileKey(run, show, level, index) { return run + "|" + show + "|" + level + "|" + index; }

  function touch(key, entry) {
    tiles.delete(key);
    tiles.set(key, entry);
    while (tiles.size > MAX_TILES) { tiles.delete(tiles.keys().next().value); }
  }

  // `response`: a fetch of this tile already under way (the page head's early request)
  function loadTile(run, show, level, index, response) {
    var key = tileKey(run, show, level, index);
    var e = tiles.get(key);
    if (e) { touch(key, e); return e.promise; }
    e = { tile: null, failed: false, promise: null };
    e.promise = (response || fetch(api("tile", { run: run, show: show, level: level, index: index }), { credentials: "same-origin" }))
      .then(function (r) {
        if (!r.ok) { return r.text().then(function (t) { throw new Error(t.trim() || r.statusText); }); }
        return r.arrayBuffer();
      })
      .then(function (buf) { e.tile = decodeTile(buf); return e.tile; })
      .catch(function (err) { e.failed = true; tiles.delete(key); throw err; });
    touch(key, e);
    return e.promise;
  }

  function levelFor(meta, width) {
    var l = Math.floor(Math.log2(Math.max(meta.span, 1) / Math.max(width, 1)));
    return Math.max(0, Math.min(meta.max_level, l));
  }

  function slotRange(meta, level, index) {
    var n = Math.pow(2, level);
    return [meta.span * index / n, meta.span * (index + 1) / n];
  }

  function slotsFor(meta, level, a, b) {
    var n = Math.pow(2, level);
    var w = meta.span / n;
    var i0 = Math.max(0, Math.floor(a / w)), i1 = Math.min(n - 1, Math.floor((b - 1e-9) / w));
    var out = [];
    for (var i = i0; i <= i1; i++) { out.push(i); }
    return out;
  }

  // ---- early prefetch: before Dash has built the page, fetch what the URL will show --------------

  var metas = new Map(); // run|show|t0|t1|q -> Promise(meta)

  function fetchMeta(params) {
    var key = [params.run, params.show || "", params.t0 || "", params.t1 || "", params.q || ""].join("|");
    if (!metas.has(key)) {
      var p = getJSON(api("meta", params));
      p.catch(function () { metas.delete(key); });
      metas.set(key, p);
    }
    return metas.get(key);
  }

  var early = null;
  (function prefetch() {
    if (!/\/timeline\/?$/.test(location.pathname)) { return; }
    var q = new URLSearchParams(location.search);
    if (!q.get("run")) { return; }
    var head = window.__tlEarly && window.__tlEarly.key === location.search ? window.__tlEarly : null;
    early = head ? head.meta.then(function (r) {
      if (!r.ok) { return r.text().then(function (t) { throw new Error(t.trim() || r.statusText); }); }
      return r.json();
    }) : fetchMeta({ run: q.get("run"), t0: q.get("t0"), t1: q.get("t1"), q: q.get("q") });
    early.then(function (meta) {
      var show = meta.show.join(",");
      var w = meta.window, level = levelFor(meta, w[1] - w[0]);
      loadTile(meta.run, show, 0, 0, head && head.tile).catch(function () {});
      slotsFor(meta, level, w[0], w[1]).forEach(function (i) { loadTile(meta.run, show, level, i).catch(function () {}); });
      drawEarly(meta);
    }).catch(function () {});
  })();

  // ---- the first view before Dash: drawn in the page's #tl-early-root (app/main.py puts it in the HTML)
  // where the timeline page will have its canvas; the page's own root adopts it once Dash has rendered
  // the page (`scan`), so the timeline does not wait for Dash's start-up (most of a cold page load).

  var EARLY_TOP_KEY = "tracelab.timelineTop";
  var DEFAULT_TOP = 226; // px from the page top to the timeline page's canvas root, 1500 px wide

  function earlyHost() { return document.getElementById("tl-early-root"); }

  function drawEarly(meta) {
    var host = earlyHost();
    if (!host || current || document.getElementById("tl-canvas-root")) { return; }
    var box = host.parentNode;
    var top = DEFAULT_TOP;
    try { top = Number(window.localStorage.getItem(EARLY_TOP_KEY)) || DEFAULT_TOP; } catch (e) { /* no storage */ }
    box.hidden = false;
    box.style.top = "0px";
    box.style.top = (top - (host.getBoundingClientRect().top - box.getBoundingClientRect().top)) + "px";
    host.dataset.run = meta.run;
    host.dataset.show = meta.show.join(",");
    host.dataset.t0 = String(meta.window[0]);
    host.dataset.t1 = String(meta.window[1]);
    host.dataset.q = meta.query || "";
    current = new Timeline(host);
    current.sig = signature(host);
    current.early = true;
  }

  function removeEarly() {
    var host = earlyHost();
    if (host && host.parentNode && host.parentNode.parentNode) { host.parentNode.parentNode.removeChild(host.parentNode); }
  }

  // ---- drawing helpers ----------------------------------------------------------------------------

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function luminance(hex) {
    var n = parseInt(hex.slice(1), 16);
    return (0.299 * ((n >> 16) & 255) + 0.587 * ((n >> 8) & 255) + 0.114 * (n & 255)) / 255;
  }

  function fitText(ctx, text, px) {
    if (ctx.measureText(text).width <= px) { return text; }
    var lo = 0, hi = text.length;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (ctx.measureText(text.slice(0, mid) + "…").width <= px) { lo = mid; } else { hi = mid - 1; }
    }
    return lo >= 2 ? text.slice(0, lo) + "…" : "";
  }

  function niceStep(raw) {
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  function axisUnit(width) { // the unit of the axis labels for a window (ns)
    return width > 5e9 ? [1e9, "s"] : width > 5e6 ? [1e6, "ms"] : [1e3, "µs"];
  }

  function setProps(id, data) {
    var dc = window.dash_clientside;
    if (dc && dc.set_props) { dc.set_props(id, { data: data }); }
  }

  // ---- the timeline ---------------------------------------------------------------------------------

  function Timeline(root) {
    this.root = root;
    this.run = root.dataset.run;
    this.show = (root.dataset.show || "").split(",").filter(Boolean);
    this.query = root.dataset.q || "";
    this.win = [Number(root.dataset.t0), Number(root.dataset.t1)];
    this.flows = true;
    this.meta = null;
    this.highlight = null;
    this.matches = null;
    this.rangeSel = null;
    this.hover = null;
    this.drag = null;
    this.mouse = null;
    this.hoverCache = new Map();
    this.queue = [];
    this.inflight = 0;
    this.inflightVisible = 0;
    this.stats = { draws: 0, complete: false, firstComplete: null, lastDraw: 0, level: 0, drawnItems: 0,
                   individual: 0, aggregated: 0, smDrawn: 0, flows: 0, legend: [] };
    this.dead = false;
    this.build();
    this.load(true);
  }

  Timeline.prototype.build = function () {
    var root = this.root;
    while (root.firstChild) { root.removeChild(root.firstChild); }
    this.legend = el("div", "tl-legend");
    this.drawnInfo = el("div", "tl-drawn hint", "loading the timeline…");
    var stage = el("div", "tl-stage");
    this.labels = el("div", "tl-labels");
    this.plot = el("div", "tl-plot");
    this.axis = el("canvas", "tl-axis");
    this.canvas = el("canvas", "tl-main");
    this.over = el("canvas", "tl-over");
    this.plot.appendChild(this.axis);
    this.plot.appendChild(this.canvas);
    this.plot.appendChild(this.over);
    stage.appendChild(this.labels);
    stage.appendChild(this.plot);
    this.tooltip = el("div", "tl-tooltip");
    this.tooltip.style.display = "none";
    root.appendChild(this.legend);
    root.appendChild(this.drawnInfo);
    root.appendChild(stage);
    document.body.appendChild(this.tooltip);
    var self = this;
    this.over.addEventListener("wheel", function (ev) { self.onWheel(ev); }, { passive: false });
    this.over.addEventListener("mousedown", function (ev) { self.onDown(ev); });
    this.over.addEventListener("mousemove", function (ev) { self.onMove(ev); });
    this.over.addEventListener("mouseleave", function () { self.mouse = null; self.setHover(null); });
    this.over.addEventListener("dblclick", function () { self.wholeRun(); });
    this.onUp = function (ev) { self.onMouseUp(ev); };
    window.addEventListener("mouseup", this.onUp);
    this.onResize = function () { self.layout(); self.requestDraw(); };
    window.addEventListener("resize", this.onResize);
  };

  // the page's own root takes the timeline drawn early over (its nodes move; nothing is fetched again)
  Timeline.prototype.adopt = function (root) {
    var old = this.root;
    while (old.firstChild) { root.appendChild(old.firstChild); }
    ["drawn", "complete", "axisUnit"].forEach(function (k) { if (old.dataset[k] !== undefined) { root.dataset[k] = old.dataset[k]; } });
    this.root = root;
    this.early = false;
    this.adoptedAt = performance.now();
    try { window.localStorage.setItem(EARLY_TOP_KEY, String(Math.round(root.getBoundingClientRect().top + window.scrollY))); } catch (e) { /* no storage */ }
    if (this.meta && Math.max(this.plot.clientWidth, 200) !== this.width) { this.layout(); this.requestDraw(); }
    var w0 = Number(root.dataset.t0), w1 = Number(root.dataset.t1);
    if (Math.round(this.win[0]) !== w0 || Math.round(this.win[1]) !== w1) { // moved before Dash was there
      setProps("tl-window", { t0: Math.round(this.win[0]), t1: Math.round(this.win[1]) });
    }
  };

  Timeline.prototype.destroy = function () {
    this.dead = true;
    window.removeEventListener("mouseup", this.onUp);
    window.removeEventListener("resize", this.onResize);
    if (this.tooltip.parentNode) { this.tooltip.parentNode.removeChild(this.tooltip); }
    clearTimeout(this.reportTimer);
    clearTimeout(this.matchTimer);
    clearTimeout(this.gapsTimer);
  };

  Timeline.prototype.showKey = function () { return this.show.join(","); };

  Timeline.prototype.load = function (first) {
    var self = this;
    var params = { run: this.run, show: this.showKey() };
    var p = null;
    if (first && early) {
      p = early.then(function (m) { return m.run === self.run && m.show.join(",") === self.showKey() ? m : fetchMeta(params); },
                     function () { return fetchMeta(params); });
    } else {
      p = fetchMeta(params);
    }
    p.then(function (meta) {
      if (self.dead) { return; }
      self.meta = meta;
      self.layout();
      self.renderLegend();
      self.schedule();
      self.requestDraw();
      if (self.query) { self.fetchMatches(); }
      if (!meta.gaps_ready || !meta.steps_ready) { self.waitForGaps(); }
    }).catch(function (err) {
      self.drawnInfo.textContent = "cannot draw this timeline: " + err.message;
      self.drawnInfo.className = "tl-drawn error-message";
    });
  };

  // big runs are analysed (gaps by cause, steps) in the background: ask again until both are there,
  // then refetch the tiles drawn without gaps. The first question after the first full draw says
  // drawn=1: the server starts that work then, so that it does not slow the first draw down.
  Timeline.prototype.waitForGaps = function (delay) {
    var self = this;
    clearTimeout(this.gapsTimer);
    this.gapsTimer = setTimeout(function () {
      if (self.dead) { return; }
      var drawn = self.stats.firstComplete !== null ? 1 : undefined;
      getJSON(api("meta", { run: self.run, show: self.showKey(), drawn: drawn, _: Date.now() })).then(function (meta) {
        if (self.dead) { return; }
        if (meta.critical && meta.critical.start.length && !(self.meta.critical && self.meta.critical.start.length)) {
          self.meta.critical = meta.critical;  // the critical path comes with the analysis, drawn from the meta
          self.requestDraw();
        }
        if (meta.steps_ready && !self.meta.steps_ready) {  // steps are drawn from the meta: no tile changes
          self.meta.steps = meta.steps;
          self.meta.rows.label = meta.rows.label;
          self.meta.steps_ready = true;
          self.layout();
        }
        if (!meta.gaps_ready || !meta.steps_ready) { self.waitForGaps(); }
        if (!meta.gaps_ready || self.meta.gaps_ready) { self.renderLegend(); self.requestDraw(); return; }
        var prefix = self.run + "|";
        Array.from(tiles.keys()).forEach(function (k) {
          var e = tiles.get(k);
          if (k.indexOf(prefix) === 0 && e.tile && !e.tile.h.gaps_ready) { tiles.delete(k); }
        });
        self.meta.causes_present = meta.causes_present;
        self.meta.gaps_ready = true;
        self.renderLegend();
        self.schedule();
        self.requestDraw();
      }).catch(function () { self.waitForGaps(); });
    }, delay === undefined ? 2000 : delay);
  };

  // which ranks the page asks unfolded: its root's data-open, else the URL's ?open= (the early root),
  // "1,3" or "none"; null: none asked (the first rank unfolded)
  function openSpec(root) {
    if (root.dataset.open !== undefined) { return root.dataset.open; }
    var q = new URLSearchParams(location.search);
    return /\/timeline\/?$/.test(location.pathname) && q.has("open") ? q.get("open") : null;
  }

  // a run of several ranks starts with every rank but the first collapsed to one summary row (its GPUs'
  // idle rows: busy / idle with the gaps by cause), or with the ranks the URL names (?open=1,3) unfolded;
  // a click on a rank's header or summary toggles it, and the URL keeps which are unfolded (tl-open)
  Timeline.prototype.initCollapse = function () {
    var rows = this.meta.rows, ranks = [];
    for (var r = 0; r < rows.rank.length; r++) {
      if (rows.rank[r] >= 0 && ranks.indexOf(rows.rank[r]) < 0) { ranks.push(rows.rank[r]); }
    }
    this.ranks = ranks;
    if (this.collapsed === undefined) {
      this.collapsed = {};
      var spec = openSpec(this.root);
      var open = spec === null ? ranks.slice(0, 1) : spec.split(",").filter(function (v) { return /^\d+$/.test(v); }).map(Number);
      if (ranks.length > 1) { ranks.forEach(function (k) { if (open.indexOf(k) < 0) { this.collapsed[k] = true; } }, this); }
    }
  };

  Timeline.prototype.toggleRank = function (rank) {
    this.collapsed[rank] = !this.collapsed[rank];
    this.layout();
    this.requestDraw();
    var self = this, open = this.ranks.filter(function (k) { return !self.collapsed[k]; });
    setProps("tl-open", open.length ? open.join(",") : "none");
  };

  Timeline.prototype.layout = function () {
    var meta = this.meta;
    if (!meta) { return; }
    var st = meta.style;
    var rows = meta.rows;
    this.initCollapse();
    var multi = this.ranks.length > 1, self = this;
    var perRank = {};
    for (var q = 0; q < rows.rank.length; q++) { perRank[rows.rank[q]] = (perRank[rows.rank[q]] || 0) + 1; }
    this.rowTop = [];
    this.rowH = [];
    this.visRows = [];
    this.hiddenRows = 0;
    var y = 0;
    while (this.labels.firstChild) { this.labels.removeChild(this.labels.firstChild); }
    var pad = el("div", "tl-label-pad");
    pad.style.height = AXIS_PX + "px";
    this.labels.appendChild(pad);
    for (var r = 0; r < rows.label.length; r++) {
      var rank = rows.rank[r], folded = multi && rank >= 0 && !!this.collapsed[rank];
      if (folded && rows.kind[r] !== "idle") {  // drawn off the canvas: nothing of it shows
        this.rowTop.push(-1e6);
        this.rowH.push(0);
        this.hiddenRows++;
        continue;
      }
      var h = Math.round(rows.height[r] * st.row_px);
      var text = rows.label[r], cls = "tl-row-label tl-row-" + rows.kind[r];
      if (folded) {  // the rank's summary: its GPU's idle row, named by the GPU's header
        h = Math.round(st.row_px);
        var head = r > 0 && rows.kind[r - 1] === "header" ? rows.label[r - 1] : "rank " + rank;
        text = "▸ " + head.split(" · ").slice(0, 2).join(" · ") + " · " + (perRank[rank] - 1) + " rows hidden";
        cls += " tl-row-header tl-row-collapsed";
      } else if (multi && rank >= 0 && rows.kind[r] === "header") {
        text = "▾ " + text;
        cls += " tl-row-expanded";
      }
      this.rowTop.push(y);
      this.rowH.push(h);
      this.visRows.push(r);
      y += h;
      var lab = el("div", cls, text);
      lab.style.height = h + "px";
      lab.style.lineHeight = h + "px";
      lab.title = folded ? head + ": " + (perRank[rank] - 1) + " rows hidden, click to expand (this row: its idle)" : rows.label[r];
      if (multi && rank >= 0 && (folded || rows.kind[r] === "header")) {
        lab.dataset.rank = String(rank);
        lab.style.cursor = "pointer";
        lab.addEventListener("click", (function (k) { return function () { self.toggleRank(k); }; })(rank));
      }
      this.labels.appendChild(lab);
    }
    this.height = Math.min(Math.max(y, 40), MAX_HEIGHT); // browsers draw no canvas taller than ~32k px
    this.width = Math.max(this.plot.clientWidth, 200);
    var dpr = window.devicePixelRatio || 1;
    [[this.axis, AXIS_PX], [this.canvas, this.height], [this.over, this.height]].forEach(function (c) {
      c[0].width = Math.round(this.width * dpr);
      c[0].height = Math.round(c[1] * dpr);
      c[0].style.width = this.width + "px";
      c[0].style.height = c[1] + "px";
      c[0].getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
    }, this);
    this.over.style.top = AXIS_PX + "px";
  };

  Timeline.prototype.rowAt = function (y) {  // over the rows shown (a collapsed rank's rows are not)
    var vis = this.visRows, lo = 0, hi = vis.length - 1;
    if (hi < 0 || y < 0 || y >= this.height) { return -1; }
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (this.rowTop[vis[mid]] <= y) { lo = mid; } else { hi = mid - 1; }
    }
    return vis[lo];
  };

  Timeline.prototype.rowMid = function (r) { return this.rowTop[r] + this.rowH[r] / 2; };

  // ---- which tiles ----------------------------------------------------------------------------------

  Timeline.prototype.level = function () { return levelFor(this.meta, this.win[1] - this.win[0]); };

  Timeline.prototype.cached = function (level, index) {
    var e = tiles.get(tileKey(this.run, this.showKey(), level, index));
    return e && e.tile ? e.tile : null;
  };

  // what to draw for each slot of the window: the tile, or its nearest coarser ancestor held here
  Timeline.prototype.layers = function () {
    var meta = this.meta, level = this.level(), out = [], complete = true;
    var self = this;
    slotsFor(meta, level, this.win[0], this.win[1]).forEach(function (i) {
      var range = slotRange(meta, level, i);
      for (var l = level, j = i; l >= 0; l--, j >>= 1) {
        var t = self.cached(l, j);
        if (t) { out.push({ tile: t, lo: range[0], hi: range[1], exact: l === level }); break; }
      }
      if (!self.cached(level, i)) { complete = false; }
    });
    return { layers: out, complete: complete, level: level };
  };

  // fetch what the view lacks, nearest first; then its neighbours and the next level down
  Timeline.prototype.schedule = function () {
    var meta = this.meta;
    if (!meta) { return; }
    var level = this.level(), w = this.win, want = [[0, 0]];
    slotsFor(meta, level, w[0], w[1]).forEach(function (i) { want.push([level, i]); });
    var n = Math.pow(2, level), width = w[1] - w[0];
    slotsFor(meta, level, Math.max(0, w[0] - width), Math.min(meta.span, w[1] + width)).forEach(function (i) {
      if (i >= 0 && i < n) { want.push([level, i]); }
    });
    if (level < meta.max_level) {
      slotsFor(meta, level + 1, w[0], w[1]).forEach(function (i) { want.push([level + 1, i]); });
    }
    var self = this, seen = {}, visible = 1 + slotsFor(meta, level, w[0], w[1]).length;
    this.queue = want.map(function (t, i) { return [t[0], t[1], i < visible]; }).filter(function (t) {
      var k = t[0] + "/" + t[1];
      if (seen[k] || self.cached(t[0], t[1])) { return false; }
      seen[k] = true;
      return true;
    });
    this.pump();
  };

  // at most CONCURRENT requests; tiles of the view first, and nothing else while one of them is loading
  Timeline.prototype.pump = function () {
    var self = this;
    while (this.inflight < CONCURRENT && this.queue.length) {
      var t = this.queue[0];
      if (this.cached(t[0], t[1])) { this.queue.shift(); continue; }
      if (!t[2] && this.inflightVisible > 0) { return; }
      this.queue.shift();
      this.inflight++;
      var vis = t[2] ? 1 : 0;
      this.inflightVisible += vis;
      loadTile(this.run, this.showKey(), t[0], t[1]).then(function () {
        self.inflight--;
        self.inflightVisible -= vis;
        if (!self.dead) { self.requestDraw(); self.pump(); }
      }, function (err) {
        self.inflight--;
        self.inflightVisible -= vis;
        if (!self.dead) {
          self.drawnInfo.textContent = "cannot load part of the timeline: " + err.message;
          self.pump();
        }
      });
    }
  };

  // ---- the window -------------------------------------------------------------------------------------

  Timeline.prototype.setWindow = function (a, b) {
    if (!this.meta) { this.win = [a, b]; return; }
    var span = this.meta.span;
    var w = Math.max(b - a, MIN_SPAN);
    if (w >= span) { a = 0; b = Math.max(span, MIN_SPAN); } else {
      a = Math.min(Math.max(a, 0), span - w);
      b = a + w;
    }
    this.win = [a, b];
    this.requestDraw();
    this.schedule();
    var self = this;
    clearTimeout(this.reportTimer);
    this.reportTimer = setTimeout(function () {
      setProps("tl-window", { t0: Math.round(self.win[0]), t1: Math.round(self.win[1]) });
      if (self.query) { self.fetchMatches(); }
    }, REPORT_MS);
  };

  Timeline.prototype.zoomAt = function (factor, frac) {
    var a = this.win[0], w = this.win[1] - this.win[0];
    var f = frac === null || frac === undefined ? 0.5 : frac;
    var pivot = a + f * w, nw = w * factor;
    this.setWindow(pivot - f * nw, pivot - f * nw + nw);
  };

  Timeline.prototype.pan = function (dir) {
    var d = dir * PAN * (this.win[1] - this.win[0]);
    this.setWindow(this.win[0] + d, this.win[1] + d);
  };

  Timeline.prototype.zoomOut = function () {
    var w = this.win[1] - this.win[0];
    this.setWindow(this.win[0] - w, this.win[1] + w);
  };

  Timeline.prototype.wholeRun = function () { if (this.meta) { this.setWindow(0, this.meta.span); } };

  Timeline.prototype.goto = function (w) { if (w) { this.setWindow(Number(w.t0), Number(w.t1)); } };

  Timeline.prototype.setShow = function (show) {
    this.show = (show || []).slice();
    this.meta = null;
    this.queue = [];
    this.load(false);
  };

  Timeline.prototype.setFlows = function (v) { this.flows = !!(v && v.length); this.requestDraw(); };

  Timeline.prototype.setHighlight = function (h) { this.highlight = h || null; this.requestDraw(); };

  Timeline.prototype.setQuery = function (q) {
    this.query = q || "";
    this.matches = null;
    if (this.query) { this.fetchMatches(); }
    this.renderLegend();
    this.requestDraw();
  };

  Timeline.prototype.fetchMatches = function () {
    var self = this, q = this.query, w = this.win.slice();
    if (!q || !this.meta) { return; }
    clearTimeout(this.matchTimer);
    this.matchTimer = setTimeout(function () {
      getJSON(api("matches", { run: self.run, show: self.showKey(), q: q, t0: Math.floor(w[0]), t1: Math.ceil(w[1]) }))
        .then(function (m) {
          if (self.dead || q !== self.query) { return; }
          self.matches = m;
          self.requestDraw();
        }).catch(function () {});
    }, 60);
  };

  // ---- drawing ----------------------------------------------------------------------------------------

  Timeline.prototype.requestDraw = function () {
    if (this.frame || this.dead) { return; }
    var self = this;
    this.frame = requestAnimationFrame(function () { self.frame = null; self.draw(); });
  };

  Timeline.prototype.draw = function () {
    var meta = this.meta;
    if (!meta || !this.canvas.isConnected) { return; }
    var t0 = performance.now();
    var st = meta.style, ctx = this.canvas.getContext("2d");
    var a = this.win[0], b = this.win[1], W = this.width, k = W / (b - a);
    var self = this;
    function X(t) { return (t - a) * k; }
    ctx.clearRect(0, 0, W, this.height);
    this.drawRows(ctx);
    this.drawAxis(a, b);
    var sel = this.layers();
    var labels = [], counts = { items: 0, bins: 0, sm: 0, individual: 0, aggregated: 0 };
    labels.byKey = new Map();
    var flowEnds = { launch: new Map(), gpu: [] };
    sel.layers.forEach(function (L) {
      var lo = Math.max(L.lo, a), hi = Math.min(L.hi, b);
      if (hi <= lo) { return; }
      var x0 = Math.floor(X(lo)), x1 = Math.ceil(X(hi));
      ctx.save();
      ctx.beginPath();
      ctx.rect(x0, 0, x1 - x0, self.height);
      ctx.clip();
      self.drawTile(ctx, L.tile, X, k, lo, hi, labels, counts, flowEnds);
      ctx.restore();
    });
    this.drawSteps(ctx, X, a, b, labels);
    this.drawMemory(ctx, X, a, b, labels);
    this.drawCritical(ctx, X, a, b);
    this.drawLabels(ctx, labels);
    // launch -> GPU arrows only when zoomed in (the window at most 1/flow_zoom of the run): at whole-run
    // zoom a launch and its kernel share a pixel column and a lone arrow was a line through every lane
    var zoomedIn = (b - a) * (st.flow_zoom || 1) <= meta.span;
    var nFlows = this.flows && zoomedIn ? this.drawFlows(ctx, X, flowEnds) : 0;
    this.drawMatches(ctx, X, a, b);
    this.drawHighlight(ctx, X, a, b);
    this.drawOverlay();
    var s = this.stats;
    s.draws++;
    s.level = sel.level;
    s.complete = sel.complete;
    s.drawnItems = counts.items + counts.bins;
    s.individual = counts.individual;
    s.aggregated = counts.aggregated;
    s.smDrawn = counts.sm;
    s.flows = nFlows;
    s.lastDraw = performance.now();
    s.drawMs = s.lastDraw - t0;
    if (sel.complete && s.firstComplete === null) {
      s.firstComplete = s.lastDraw;
      window.__tlFirstComplete = s.lastDraw;
      if (!meta.gaps_ready || !meta.steps_ready) { this.waitForGaps(0); }
    }
    this.drawnInfo.className = "tl-drawn hint";
    this.drawnInfo.textContent = (counts.individual + counts.aggregated + counts.sm).toLocaleString() + " items drawn (" +
      counts.individual.toLocaleString() + " individual, " + counts.aggregated.toLocaleString() + " aggregated" +
      (counts.sm ? "; " + counts.sm.toLocaleString() + " on SM lanes)" : ")") +
      (nFlows ? " · " + nFlows.toLocaleString() + " launch → GPU arrows" : "") +
      (meta.hidden_lanes ? " · " + meta.hidden_lanes.toLocaleString() + " streams / threads with no work hidden" : "") +
      (this.hiddenRows ? " · " + this.ranks.filter(function (k) { return self.collapsed[k]; }).length +
        " rank(s) collapsed (click a rank's row to expand)" : "") +
      (sel.complete ? "" : " · loading detail…");
    this.root.dataset.drawn = String(s.draws);
    this.root.dataset.complete = sel.complete ? "1" : "0";
    this.renderLegendIfChanged(counts);
  };

  Timeline.prototype.drawRows = function (ctx) {
    var rows = this.meta.rows, W = this.width;
    for (var r = 0; r < rows.kind.length; r++) {
      if (rows.kind[r] === "header") {
        ctx.fillStyle = "#eef0f3";
        ctx.fillRect(0, this.rowTop[r], W, this.rowH[r]);
        ctx.fillStyle = "#888";
        ctx.fillRect(0, this.rowTop[r], W, 1);
      } else if (rows.kind[r] === "idle") {
        ctx.fillStyle = "#fcf7f6";
        ctx.fillRect(0, this.rowTop[r], W, this.rowH[r]);
        if (this.collapsed && this.collapsed[rows.rank[r]] && this.ranks.length > 1) {  // a rank's summary
          ctx.fillStyle = "#888";
          ctx.fillRect(0, this.rowTop[r], W, 1);
        }
      } else {
        ctx.fillStyle = "#f4f4f4";
        ctx.fillRect(0, this.rowTop[r] + this.rowH[r] - 1, W, 1);
      }
    }
  };

  Timeline.prototype.drawAxis = function (a, b) {
    var ctx = this.axis.getContext("2d"), W = this.width, k = W / (b - a);
    var u = axisUnit(b - a), step = niceStep((b - a) / 8);
    var main = this.canvas.getContext("2d");
    ctx.clearRect(0, 0, W, AXIS_PX);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, AXIS_PX);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#333";
    ctx.textBaseline = "top";
    var decimals = Math.max(0, Math.ceil(-Math.log10(step / u[0]) - 1e-9));
    main.fillStyle = "rgba(0,0,0,0.06)";
    for (var t = Math.ceil(a / step) * step; t <= b; t += step) {
      var x = (t - a) * k;
      ctx.fillRect(x, AXIS_PX - 6, 1, 6);
      main.fillRect(x, 0, 1, this.height);
      var text = "+" + (t / u[0]).toFixed(Math.min(decimals, 6)) + " " + u[1];
      ctx.fillText(text, Math.min(x + 3, W - ctx.measureText(text).width - 2), 4);
    }
    ctx.fillStyle = "#666";
    ctx.fillRect(0, AXIS_PX - 1, W, 1);
    this.root.dataset.axisUnit = u[1];
  };

  Timeline.prototype.drawTile = function (ctx, T, X, k, lo, hi, labels, counts, flowEnds) {
    var st = this.meta.style, A = T.a, self = this;
    var lvlPx = [st.bin_px, st.idle_px, st.sm_px];
    var binColor = [st.bin_color, st.idle_color, st.classes[10].color];
    // aggregated stretches: as thick as they are busy (idle rows: as thick as idle)
    for (var kind = 0; kind < 3; kind++) {
      ctx.fillStyle = binColor[kind];
      for (var j = 0; j < T.nb; j++) {
        if (A["b.kind"][j] !== kind || A["b.end"][j] < lo || A["b.start"][j] > hi) { continue; }
        var r = A["b.row"][j], th = lvlPx[kind][A["b.level"][j]];
        var x0 = X(A["b.start"][j]), x1 = X(A["b.end"][j]);
        ctx.fillRect(x0, this.rowMid(r) - th / 2, Math.max(x1 - x0, 1), th);
        if (kind === 2) { counts.sm++; } else if (kind === 0) { counts.aggregated++; }
        counts.bins++;
      }
    }
    // gaps by cause on the idle rows, at least a pixel wide
    for (var g = 0; g < T.ng; g++) {
      if (A["g.end"][g] < lo || A["g.start"][g] > hi) { continue; }
      var cause = st.causes[A["g.cause"][g]];
      ctx.fillStyle = cause ? cause.color : "#333";
      var gx0 = X(A["g.start"][g]), gx1 = X(A["g.end"][g]);
      ctx.fillRect(gx0, this.rowMid(A["g.row"][g]) - st.gap_px / 2, Math.max(gx1 - gx0, 1), st.gap_px);
    }
    // events drawn one by one, by class; boxes wider than 3 px end a pixel early (touching boxes stay apart)
    var names = T.h.names, gpu = st.gpu_classes, rank = this.meta.rows.rank;
    for (var c = 0; c < st.classes.length; c++) {
      var cls = st.classes[c], h = cls.thin ? st.thin_px : st.box_px;
      ctx.fillStyle = cls.color;
      for (var i = 0; i < T.n; i++) {
        if (A["i.cls"][i] !== c) { continue; }
        var s = A["i.start"][i], e = A["i.end"][i];
        if (e < lo || s > hi) { continue; }
        var ix0 = X(s), ix1 = X(e), w = ix1 - ix0;
        if (w > 3) { w -= 1; }
        var row = A["i.row"][i], y = this.rowMid(row);
        ctx.fillRect(ix0, y - h / 2, Math.max(w, 1), h);
        var first = s >= lo || lo <= this.win[0]; // an event in two slots is counted once
        if (first) {
          counts.items++;
          if (c === 10) { counts.sm++; } else { counts.individual++; }
        }
        if (!cls.thin && A["i.name"][i] >= 0) {
          var vx0 = Math.max(ix0, X(lo), 0), vx1 = Math.min(ix0 + w, X(hi), this.width);
          var p = A["i.pos"][i], key = c + ":" + row + ":" + (p >= 0 ? p : s);
          var prev = labels.byKey.get(key);
          if (prev) {
            prev.x0 = Math.min(prev.x0, vx0);
            prev.x1 = Math.max(prev.x1, vx1);
          } else if (vx1 > vx0) {
            var lab = { x0: vx0, x1: vx1, y: y, text: names[A["i.name"][i]] || "", color: cls.color };
            labels.byKey.set(key, lab);
            labels.push(lab);
          }
        }
        var corr = A["i.corr"][i];
        if (corr >= 0 && s >= lo && s < hi) {
          if (A["i.launch"][i]) {
            flowEnds.launch.set(rank[row] + ":" + corr, [ix0, y]);
          } else if (gpu.indexOf(c) >= 0) {
            flowEnds.gpu.push([rank[row] + ":" + corr, ix0, y]);
          }
        }
      }
    }
  };

  Timeline.prototype.drawSteps = function (ctx, X, a, b, labels) {
    var sp = this.meta.steps, st = this.meta.style, k = this.width / (b - a);
    for (var i = 0; i < sp.start.length; i++) {
      if (sp.end[i] < a || sp.start[i] > b) { continue; }
      var x0 = X(sp.start[i]), x1 = X(sp.end[i]), w = x1 - x0;
      if (w > 3) { w -= 1; }
      var y = this.rowMid(sp.row[i]);
      ctx.fillStyle = st.step_colors[i % 2];
      ctx.fillRect(x0, y - st.box_px / 2, Math.max(w, 1), st.box_px);
      var vx0 = Math.max(x0, 0), vx1 = Math.min(x0 + w, this.width);
      if (vx1 - vx0 >= st.label_min_px) {
        labels.push({ x0: vx0, x1: vx1, y: y, text: sp.label[i], color: st.step_colors[i % 2] });
      }
    }
    return k;
  };

  // the GPU memory lane (issue 27): allocated bytes over time as a filled step line, scaled to the device's
  // peak (meta.memory: one series per row, times in ns from the run start)
  Timeline.prototype.drawMemory = function (ctx, X, a, b, labels) {
    var mem = this.meta.memory;
    if (!mem || !mem.series) { return; }
    for (var s = 0; s < mem.series.length; s++) {
      var S = mem.series[s], top = this.rowTop[S.row], h = this.rowH[S.row] - 2;
      if (top === undefined || !S.t.length) { continue; }
      var peak = S.peak || 1;
      ctx.beginPath();
      ctx.moveTo(Math.max(X(S.t[0]), 0), top + h + 1);
      var lastY = top + h + 1;
      for (var i = 0; i < S.t.length; i++) {
        if (S.t[i] > b && i > 0) { break; }
        var x = X(S.t[i]), y = top + 1 + h * (1 - S.v[i] / peak);
        if (x < -1) { lastY = y; continue; }
        ctx.lineTo(Math.max(x, 0), lastY);
        ctx.lineTo(Math.max(x, 0), y);
        lastY = y;
      }
      ctx.lineTo(this.width, lastY);
      ctx.lineTo(this.width, top + h + 1);
      ctx.closePath();
      ctx.fillStyle = "rgba(128, 0, 160, 0.35)";
      ctx.fill();
      ctx.strokeStyle = "#8000a0";
      ctx.stroke();
      var px = X(S.peak_t);
      if (px >= 0 && px <= this.width) {
        ctx.fillStyle = "#8000a0";
        ctx.fillRect(px - 1, top, 2, h + 2);
        labels.push({ x0: px + 3, x1: px + 160, y: top + 6, text: S.peak_label, color: "#ffffff" });
      }
    }
  };

  // the critical path of each step (one lane per rank): segments coloured by category, from the meta
  Timeline.prototype.criticalColor = function (category) {
    var cs = this.meta.style.critical || [];
    for (var i = 0; i < cs.length; i++) { if (cs[i].category === category) { return cs[i].color; } }
    return "#888";
  };

  Timeline.prototype.drawCritical = function (ctx, X, a, b) {
    var cp = this.meta.critical, st = this.meta.style;
    if (!cp || !cp.start.length) { return; }
    var h = st.box_px * 0.8;
    for (var i = 0; i < cp.start.length; i++) {
      if (cp.end[i] < a || cp.start[i] > b) { continue; }
      var x0 = X(cp.start[i]), x1 = X(cp.end[i]);
      var y = this.rowMid(cp.row[i]);
      ctx.fillStyle = this.criticalColor(cp.category[i]);
      ctx.fillRect(x0, y - h / 2, Math.max(x1 - x0, 1), h);
    }
  };

  Timeline.prototype.drawLabels = function (ctx, labels) {
    var st = this.meta.style;
    labels = labels.filter(function (L) { return L.x1 - L.x0 >= st.label_min_px; });
    labels.sort(function (p, q) { return (q.x1 - q.x0) - (p.x1 - p.x0); });
    ctx.font = "10px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    var n = Math.min(labels.length, st.label_max), drawn = 0;
    var taken = new Map(); // per row (y): the [x0, x1] of the labels written there, widest boxes first
    for (var i = 0; i < n; i++) {
      var L = labels[i];
      var text = fitText(ctx, L.text, L.x1 - L.x0 - 6);
      if (!text) { continue; }
      var x0 = L.x0 + 3, x1 = x0 + ctx.measureText(text).width, row = taken.get(L.y) || [];
      // boxes that overlap on one row (an API call inside another's box): one label, never two on top
      if (row.some(function (r) { return x0 < r[1] + 2 && r[0] < x1 + 2; })) { continue; }
      row.push([x0, x1]);
      taken.set(L.y, row);
      ctx.fillStyle = luminance(L.color) < 0.55 ? "#fff" : "#111";
      ctx.fillText(text, x0, L.y + 0.5);
      drawn++;
    }
    this.stats.labels = drawn;
    this.stats.labelBoxes = [];
    var self = this;
    taken.forEach(function (row, y) { row.forEach(function (r) { self.stats.labelBoxes.push([r[0], r[1], y]); }); });
  };

  Timeline.prototype.drawFlows = function (ctx, X, ends) {
    var pairs = [];
    ends.gpu.forEach(function (g) {
      var l = ends.launch.get(g[0]);
      if (l && l[1] >= 0 && g[2] >= 0) { pairs.push([l[0], l[1], g[1], g[2]]); }  // not to a collapsed rank
    });
    if (!pairs.length || pairs.length > this.meta.style.flow_max) { return 0; }
    ctx.strokeStyle = "rgba(60,60,60,0.5)";
    ctx.fillStyle = "rgba(60,60,60,0.75)";
    ctx.lineWidth = 1;
    pairs.forEach(function (p) {
      ctx.beginPath();
      ctx.moveTo(p[0], p[1]);
      ctx.lineTo(p[2], p[3]);
      ctx.stroke();
      var ang = Math.atan2(p[3] - p[1], p[2] - p[0]);
      ctx.beginPath();
      ctx.moveTo(p[2], p[3]);
      ctx.lineTo(p[2] - 7 * Math.cos(ang - 0.4), p[3] - 7 * Math.sin(ang - 0.4));
      ctx.lineTo(p[2] - 7 * Math.cos(ang + 0.4), p[3] - 7 * Math.sin(ang + 0.4));
      ctx.closePath();
      ctx.fill();
    });
    return pairs.length;
  };

  Timeline.prototype.drawMatches = function (ctx, X, a, b) {
    var m = this.matches;
    this.stats.matchesDrawn = 0;
    if (!m || !this.query) { return; }
    ctx.strokeStyle = "#ff00aa";
    ctx.lineWidth = 2;
    for (var i = 0; i < m.start.length; i++) {
      if (m.end[i] < a || m.start[i] > b) { continue; }
      var x0 = X(m.start[i]), x1 = Math.max(X(m.end[i]), x0 + 2), y = this.rowMid(m.row[i]);
      ctx.strokeRect(x0 - 1, y - 9, x1 - x0 + 2, 18);
      this.stats.matchesDrawn++;
    }
  };

  Timeline.prototype.drawHighlight = function (ctx, X, a, b) {
    var h = this.highlight;
    this.stats.highlighted = 0;
    if (!h || !h.start || !h.start.length) { return; }
    var pts = [];
    ctx.strokeStyle = "#d4a000";
    ctx.fillStyle = "rgba(255,215,0,0.35)";
    ctx.lineWidth = 3;
    for (var i = 0; i < h.start.length; i++) {
      var x0 = X(h.start[i]), x1 = Math.max(X(h.end[i]), x0 + 3), y = this.rowMid(h.row[i]);
      ctx.fillRect(x0 - 2, y - 10, x1 - x0 + 4, 20);
      ctx.strokeRect(x0 - 2, y - 10, x1 - x0 + 4, 20);
      pts.push([x0, y]);
      if (h.end[i] >= a && h.start[i] <= b) { this.stats.highlighted++; }
    }
    pts.sort(function (p, q) { return p[0] - q[0]; });
    ctx.setLineDash([5, 4]);
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach(function (p, i) { if (i) { ctx.lineTo(p[0], p[1]); } else { ctx.moveTo(p[0], p[1]); } });
    ctx.stroke();
    ctx.setLineDash([]);
  };

  // the overlay: a dragged range (while dragging and after) and the event under the mouse
  Timeline.prototype.drawOverlay = function () {
    var ctx = this.over.getContext("2d"), a = this.win[0], b = this.win[1], k = this.width / (b - a);
    ctx.clearRect(0, 0, this.width, this.height);
    var r = this.drag && this.drag.moved ? [this.drag.t0, this.drag.t1] : this.rangeSel;
    if (r) {
      var x0 = (Math.min(r[0], r[1]) - a) * k, x1 = (Math.max(r[0], r[1]) - a) * k;
      ctx.fillStyle = "rgba(37,99,235,0.12)";
      ctx.fillRect(x0, 0, x1 - x0, this.height);
      ctx.fillStyle = "rgba(37,99,235,0.8)";
      ctx.fillRect(x0, 0, 1, this.height);
      ctx.fillRect(x1, 0, 1, this.height);
    }
    if (this.hover && this.hover.box) {
      var bx = this.hover.box;
      ctx.strokeStyle = "#111";
      ctx.lineWidth = 1;
      ctx.strokeRect(bx[0] - 0.5, bx[1] - 0.5, Math.max(bx[2], 1) + 1, bx[3] + 1);
    }
  };

  // ---- the legend -------------------------------------------------------------------------------------

  Timeline.prototype.legendEntries = function (classes) {
    var st = this.meta.style, out = [];
    st.classes.forEach(function (c, i) { if (classes[i]) { out.push([c.legend, c.color]); } });
    out.push(["short events, aggregated (thickness = busy fraction)", st.bin_color]);
    out.push(["idle, all (thickness = idle fraction)", st.idle_color]);
    var present = this.meta.causes_present || [];
    st.causes.forEach(function (c) { if (present.indexOf(c.cause) >= 0) { out.push([c.legend, c.color]); } });
    if (this.meta.steps.start.length) { out.push(["steps", st.step_colors[0]]); }
    if (this.meta.memory && this.meta.memory.series && this.meta.memory.series.length) {
      out.push(["GPU memory allocated (peak marked)", "#8000a0"]);
    }
    var cp = this.meta.critical, self = this;
    if (cp && cp.start.length) {
      (st.critical || []).forEach(function (c) {
        if (cp.category.indexOf(c.category) >= 0) { out.push([c.legend, self.criticalColor(c.category)]); }
      });
    }
    if (this.query) { out.push(["search matches", "#ff00aa"]); }
    if (this.stats.flows) { out.push(["launch → GPU", "#555"]); }
    if (this.highlight && this.highlight.start && this.highlight.start.length) { out.push(["selected (correlated)", "#d4a000"]); }
    return out;
  };

  Timeline.prototype.renderLegend = function () { this.legendKey = null; this.renderLegendIfChanged(null); };

  Timeline.prototype.renderLegendIfChanged = function () {
    if (!this.meta) { return; }
    var classes = {}, self = this;
    this.layers().layers.forEach(function (L) {
      var c = L.tile.a["i.cls"];
      for (var i = 0; i < c.length; i++) { classes[c[i]] = true; }
    });
    var entries = this.legendEntries(classes);
    var key = JSON.stringify(entries);
    if (key === this.legendKey) { return; }
    this.legendKey = key;
    while (this.legend.firstChild) { this.legend.removeChild(this.legend.firstChild); }
    entries.forEach(function (e) {
      var item = el("span", "tl-legend-item");
      item.dataset.name = e[0];
      var sw = el("span", "tl-swatch");
      sw.style.background = e[1];
      item.appendChild(sw);
      item.appendChild(document.createTextNode(e[0]));
      self.legend.appendChild(item);
    });
    this.stats.legend = entries.map(function (e) { return e[0]; });
  };

  // ---- hit testing, tooltips, mouse --------------------------------------------------------------------

  Timeline.prototype.hit = function (x, y) {
    var meta = this.meta;
    if (!meta) { return null; }
    var row = this.rowAt(y);
    if (row < 0) { return null; }
    var a = this.win[0], b = this.win[1], k = this.width / (b - a), t = a + x / k, tol = 3 / k;
    var self = this, best = null;
    var rowY = this.rowMid(row);
    this.layers().layers.forEach(function (L) {
      if (t < L.lo || t > L.hi) { return; }
      var A = L.tile.a, T = L.tile;
      for (var i = 0; i < T.n; i++) {
        if (A["i.row"][i] !== row || A["i.start"][i] - tol > t || A["i.end"][i] + tol < t) { continue; }
        var d = A["i.end"][i] - A["i.start"][i];
        if (!best || best.what !== "item" || d < best.d) {
          best = { what: "item", d: d, tile: T, i: i, pos: A["i.pos"][i], cls: A["i.cls"][i],
                   box: [(A["i.start"][i] - a) * k, rowY - 7, (A["i.end"][i] - A["i.start"][i]) * k, 14] };
        }
      }
      if (best) { return; }
      for (var g = 0; g < T.ng; g++) {
        if (A["g.row"][g] !== row || A["g.start"][g] - tol > t || A["g.end"][g] + tol < t) { continue; }
        best = { what: "gap", tile: T, i: g, index: A["g.index"][g], count: A["g.count"][g],
                 cause: meta.style.causes[A["g.cause"][g]].cause,
                 box: [(A["g.start"][g] - a) * k, rowY - 6, (A["g.end"][g] - A["g.start"][g]) * k, 12] };
        return;
      }
      for (var j = 0; j < T.nb; j++) {
        if (A["b.row"][j] !== row || A["b.start"][j] > t || A["b.end"][j] < t) { continue; }
        best = { what: "bin", tile: T, i: j, kind: A["b.kind"][j], count: A["b.count"][j], busy: A["b.busy"][j],
                 box: [(A["b.start"][j] - a) * k, rowY - 6, (A["b.end"][j] - A["b.start"][j]) * k, 12] };
        return;
      }
    });
    if (!best && meta.critical) {
      var cp = meta.critical;
      for (var c = 0; c < cp.start.length; c++) {
        if (cp.row[c] === row && cp.start[c] <= t && cp.end[c] >= t) {
          best = { what: "critical", label: cp.label[c], ns: cp.end[c] - cp.start[c],
                   box: [(cp.start[c] - a) * k, rowY - 6, (cp.end[c] - cp.start[c]) * k, 12] };
          break;
        }
      }
    }
    if (!best) {
      var sp = meta.steps;
      for (var s = 0; s < sp.start.length; s++) {
        if (sp.row[s] === row && sp.start[s] <= t && sp.end[s] >= t) {
          best = { what: "step", label: sp.label[s], box: [(sp.start[s] - a) * k, rowY - 6, (sp.end[s] - sp.start[s]) * k, 12] };
          break;
        }
      }
    }
    if (best) { best.row = row; }
    return best;
  };

  Timeline.prototype.tooltipLines = function (h, done) {
    var meta = this.meta, cls = meta.style.classes, rowLabel = meta.rows.label[h.row];
    var key = null, params = null, head = [];
    if (h.what === "item") {
      var name = h.tile.h.names[h.tile.a["i.name"][h.i]] || "";
      head = [name, cls[h.cls].legend + " · " + rowLabel];
      if (h.pos >= 0) { key = "e" + h.pos; params = { run: this.run, event: h.pos }; }
      if (h.cls === 10) { head = [name, "SM activity · " + rowLabel]; }
    } else if (h.what === "gap") {
      if (h.index >= 0) {
        head = ["idle (" + h.cause + ")"];
        key = "g" + h.index;
        params = { run: this.run, gap: h.index };
      } else {
        head = ["idle (" + h.cause + ") · " + h.count.toLocaleString() + " gaps within a pixel: zoom in to see each"];
      }
    } else if (h.what === "bin") {
      var pct = Math.round(h.busy * 1000) / 10;
      head = h.kind === 1 ? ["idle " + pct + "% of this stretch", rowLabel]
        : [h.count.toLocaleString() + " short events", "busy " + pct + "% · " + rowLabel];
    } else if (h.what === "step") {
      head = [h.label, rowLabel];
    } else if (h.what === "critical") {
      var u = h.ns > 5e9 ? [1e9, "s"] : h.ns > 5e6 ? [1e6, "ms"] : h.ns > 5e3 ? [1e3, "µs"] : [1, "ns"];
      head = ["critical path: " + h.label, (h.ns / u[0]).toFixed(u[0] > 1 ? 2 : 0) + " " + u[1] + " · " + rowLabel];
    }
    done(head);
    if (!key) { return; }
    var self = this, hit = this.hoverCache.get(key);
    var extra = h.cls === 10 ? ["on " + rowLabel] : [];
    if (hit) { done(hit.concat(extra)); return; }
    getJSON(api("hover", params)).then(function (r) {
      self.hoverCache.set(key, r.lines);
      if (self.hover === h) { done(r.lines.concat(extra)); }
    }).catch(function () {});
  };

  Timeline.prototype.setHover = function (h, ev) {
    this.hover = h;
    this.drawOverlay();
    var tip = this.tooltip;
    if (!h || !ev) { tip.style.display = "none"; return; }
    var x = ev.clientX, y = ev.clientY;
    this.tooltipLines(h, function (lines) {
      while (tip.firstChild) { tip.removeChild(tip.firstChild); }
      lines.forEach(function (line, i) { tip.appendChild(el("div", i ? "tl-tip-line" : "tl-tip-head", line)); });
      tip.style.display = "block";
      var w = tip.offsetWidth, hgt = tip.offsetHeight;
      tip.style.left = Math.max(4, Math.min(x + 14, window.innerWidth - w - 8)) + "px";
      tip.style.top = (y + 16 + hgt > window.innerHeight ? Math.max(4, y - hgt - 10) : y + 16) + "px";
    });
  };

  Timeline.prototype.local = function (ev) {
    var r = this.over.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  };

  Timeline.prototype.onWheel = function (ev) {
    if (!this.meta) { return; }
    ev.preventDefault();
    var p = this.local(ev);
    var dy = ev.deltaMode === 1 ? ev.deltaY * 30 : ev.deltaY;
    this.zoomAt(Math.exp(Math.max(-200, Math.min(200, dy)) * 0.002), p[0] / this.width);
  };

  Timeline.prototype.timeAt = function (x) {
    return this.win[0] + (x / this.width) * (this.win[1] - this.win[0]);
  };

  Timeline.prototype.onDown = function (ev) {
    if (ev.button !== 0 || !this.meta) { return; }
    var p = this.local(ev);
    this.drag = { x: p[0], y: p[1], t0: this.timeAt(p[0]), t1: this.timeAt(p[0]), moved: false };
    ev.preventDefault();
  };

  Timeline.prototype.onMove = function (ev) {
    var p = this.local(ev);
    this.mouse = p[0] / this.width;
    if (this.drag) {
      if (Math.abs(p[0] - this.drag.x) > 3) { this.drag.moved = true; }
      this.drag.t1 = this.timeAt(p[0]);
      this.setHover(null);
      return;
    }
    var h = this.hit(p[0], p[1]);
    if (!h) { this.setHover(null); return; }
    if (this.hover && h.what === this.hover.what && h.tile === this.hover.tile && h.i === this.hover.i) {
      return;
    }
    this.setHover(h, ev);
  };

  Timeline.prototype.onMouseUp = function (ev) {
    var d = this.drag;
    if (!d) { return; }
    this.drag = null;
    if (d.moved) {
      var a = Math.max(0, Math.min(d.t0, d.t1)), b = Math.min(this.meta.span, Math.max(d.t0, d.t1));
      this.rangeSel = [a, b];
      this.drawOverlay();
      setProps("tl-range-sel", { t0: Math.floor(a), t1: Math.ceil(b) });
      return;
    }
    var h = this.hit(d.x, d.y);
    if (h && h.what === "item" && h.pos >= 0) {
      setProps("tl-click", { pos: h.pos, n: Date.now() });
    }
  };

  // ---- keys ---------------------------------------------------------------------------------------------

  function typing(target) {
    var tag = (target && target.tagName) || "";
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  document.addEventListener("keydown", function (ev) {
    var t = current;
    if (!t || !t.meta || ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) { return; }
    var key = (ev.key || "").toLowerCase();
    if (key === "w" || key === "s") {
      t.zoomAt(key === "w" ? ZOOM : 1 / ZOOM, t.mouse);
    } else if (key === "a" || key === "d") {
      t.pan(key === "d" ? 1 : -1);
    } else {
      return;
    }
    ev.preventDefault();
  });

  // ---- one timeline per page: (re)built when Dash renders its root ------------------------------------

  var current = null;

  function signature(root) {
    return [root.dataset.run, root.dataset.t0, root.dataset.t1, root.dataset.show, root.dataset.q].join("|");
  }

  function scan() {
    var root = document.getElementById("tl-canvas-root");
    if (current && current.early) {
      var page = document.getElementById("_pages_content");
      if (!root && !(page && page.firstChild)) { return; } // Dash has not rendered the page yet
      if (root && current.sig === signature(root)) {
        current.adopt(root);
      } else { // the page shows something else (another window, an error): start again there
        current.destroy();
        current = null;
      }
      removeEarly();
    }
    if (current && (!root || current.root !== root || current.sig !== signature(root))) {
      current.destroy();
      current = null;
    }
    if (root && !current) {
      current = new Timeline(root);
      current.sig = signature(root);
    }
  }

  new MutationObserver(scan).observe(document.documentElement, {
    childList: true, subtree: true, attributes: true,
    attributeFilter: ["data-run", "data-t0", "data-t1", "data-show", "data-q"],
  });
  // loaded async from the page head: the page may be parsed, even rendered, already
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", scan); } else { scan(); }

  function call(method) {
    return function () { if (current) { return current[method].apply(current, arguments); } };
  }

  window.tracelabTimeline = {
    setShow: call("setShow"),
    setFlows: call("setFlows"),
    zoomOut: call("zoomOut"),
    wholeRun: call("wholeRun"),
    goto: call("goto"),
    setHighlight: call("setHighlight"),
    setQuery: call("setQuery"),
    setWindow: call("setWindow"),
    zoomAt: call("zoomAt"),
    pan: call("pan"),
    toggleRank: call("toggleRank"),
    // for tests and the benchmark: what is drawn now
    state: function () {
      var t = current;
      if (!t || !t.meta) { return null; }
      return {
        run: t.run, window: t.win.slice(), span: t.meta.span, level: t.stats.level, complete: t.stats.complete,
        draws: t.stats.draws, lastDraw: t.stats.lastDraw, drawMs: t.stats.drawMs, firstComplete: t.stats.firstComplete,
        items: t.stats.drawnItems, individual: t.stats.individual, aggregated: t.stats.aggregated, sm: t.stats.smDrawn,
        flows: t.stats.flows, labels: t.stats.labels, labelBoxes: (t.stats.labelBoxes || []).slice(), legend: t.stats.legend.slice(), rows: t.meta.rows.label.slice(),
        rowKinds: t.meta.rows.kind.slice(), rowRanks: t.meta.rows.rank.slice(), matchesDrawn: t.stats.matchesDrawn, highlighted: t.stats.highlighted,
        query: t.query, show: t.show.slice(), width: t.width, origin: t.meta.origin,
        early: !!t.early, adoptedAt: t.adoptedAt || null,
        collapsed: Object.keys(t.collapsed || {}).filter(function (k) { return t.collapsed[k]; }).map(Number),
        hiddenRows: t.hiddenRows || 0, shownRows: (t.visRows || []).slice(), height: t.height,
      };
    },
    // screen position (client coordinates) of the centre of time `t` (ns from the run start) on row `r`
    pointAt: function (t, r) {
      var c = current;
      if (!c || !c.meta) { return null; }
      var box = c.over.getBoundingClientRect();
      return [box.left + (t - c.win[0]) / (c.win[1] - c.win[0]) * c.width, box.top + c.rowMid(r)];
    },
    // events drawn one by one in view: [start, end, row, class legend, pos, correlation]
    drawnItems: function () {
      var c = current, out = [];
      if (!c || !c.meta) { return out; }
      c.layers().layers.forEach(function (L) {
        var A = L.tile.a;
        for (var i = 0; i < L.tile.n; i++) {
          if (A["i.end"][i] < Math.max(L.lo, c.win[0]) || A["i.start"][i] > Math.min(L.hi, c.win[1])) { continue; }
          out.push([A["i.start"][i], A["i.end"][i], A["i.row"][i], c.meta.style.classes[A["i.cls"][i]].legend,
                    A["i.pos"][i], A["i.corr"][i], L.tile.h.names[A["i.name"][i]] || ""]);
        }
      });
      return out;
    },
  };
})();
