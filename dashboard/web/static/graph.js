// Baton dashboard: the graph page. dagre (vendored) lays the tasks out
// left to right; this script draws them as SVG links, zooms and pans, and
// recolours them as the live stream reports changes.
(function () {
  "use strict";
  var box = document.getElementById("graph");
  if (!box || !window.dagre) return;
  var base = document.body.dataset.base;
  var query = box.dataset.query;
  var NS = "http://www.w3.org/2000/svg";
  var svg, view, scale = 1, tx = 0, ty = 0, laidOut = "", nodesByID = {};
  var tools = document.querySelector(".graph-tools");
  if (tools) tools.hidden = false;

  function s(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function short(id) { return id.length > 28 ? id.substring(0, 27) + "…" : id; }
  function apply() { view.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + scale + ")"); }
  function zoomAt(f, cx, cy) {
    var ns = Math.min(4, Math.max(0.05, scale * f));
    f = ns / scale;
    tx = cx - (cx - tx) * f; ty = cy - (cy - ty) * f; scale = ns;
    apply();
  }
  function fit(w, h) {
    var bw = box.clientWidth, bh = box.clientHeight;
    scale = Math.min(1.5, Math.min(bw / (w + 40), bh / (h + 40)));
    tx = (bw - w * scale) / 2; ty = (bh - h * scale) / 2;
    apply();
  }

  function draw(g) {
    var key = g.nodes.map(function (n) { return n.id; }).join("\u0000") + "|" + g.edges.join(";");
    if (key === laidOut) { // same graph: recolour only
      g.nodes.forEach(function (n) {
        var e = nodesByID[n.id];
        if (!e) return;
        e.g.setAttribute("class", "node st-" + n.status + (n.root ? " root" : ""));
        e.sub.textContent = n.status + (n.attempts > 1 ? " · " + n.attempts + " attempts" : "");
        e.a.setAttribute("aria-label", n.id + ", " + n.status);
      });
      return;
    }
    var first = laidOut === "";
    laidOut = key;
    var dg = new dagre.graphlib.Graph();
    dg.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, marginx: 10, marginy: 10 });
    dg.setDefaultEdgeLabel(function () { return {}; });
    g.nodes.forEach(function (n, i) {
      var w = Math.max(short(n.id).length * 7.6, (n.status.length + (n.attempts > 1 ? 13 : 0)) * 6.8);
      dg.setNode(String(i), { width: Math.max(90, w + 22), height: 44 });
    });
    g.edges.forEach(function (e) { dg.setEdge(String(e[0]), String(e[1])); });
    dagre.layout(dg);
    box.replaceChildren();
    svg = s("svg", { role: "group", "aria-label": "Tasks and their dependencies" });
    var defs = s("defs");
    var marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
    marker.appendChild(s("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
    defs.appendChild(marker); svg.appendChild(defs);
    view = s("g");
    svg.appendChild(view);
    dg.edges().forEach(function (e) {
      var pts = dg.edge(e).points;
      var d = "M" + pts.map(function (p) { return p.x.toFixed(1) + "," + p.y.toFixed(1); }).join(" L");
      view.appendChild(s("path", { class: "edge", d: d, "marker-end": "url(#arrow)" }));
    });
    nodesByID = {};
    g.nodes.forEach(function (n, i) {
      var p = dg.node(String(i));
      var a = s("a", { href: base + "task?id=" + encodeURIComponent(n.id), "data-id": n.id, "aria-label": n.id + ", " + n.status });
      var gr = s("g", { class: "node st-" + n.status + (n.root ? " root" : ""), transform: "translate(" + (p.x - p.width / 2) + "," + (p.y - p.height / 2) + ")" });
      gr.appendChild(s("title", null, n.id + " (" + n.status + ")"));
      gr.appendChild(s("rect", { width: p.width, height: p.height }));
      gr.appendChild(s("text", { x: 10, y: 18 }, short(n.id)));
      var sub = s("text", { class: "sub", x: 10, y: 35 }, n.status + (n.attempts > 1 ? " · " + n.attempts + " attempts" : ""));
      gr.appendChild(sub);
      a.appendChild(gr);
      view.appendChild(a);
      nodesByID[n.id] = { a: a, g: gr, sub: sub };
    });
    box.appendChild(svg);
    var gg = dg.graph();
    box.dataset.width = gg.width; box.dataset.height = gg.height;
    if (first) fit(gg.width || 1, gg.height || 1); else apply();
    box.dataset.ready = "1";
  }

  var loading = false, lastLoad = 0, again = false;
  function load() {
    if (loading) { again = true; return; }
    loading = true; lastLoad = Date.now();
    fetch(base + "graph.json?" + query, { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (g) { if (g.nodes) draw(g); })
      .catch(function () {})
      .then(function () { loading = false; if (again) { again = false; setTimeout(load, 1500); } });
  }
  load();
  // Live: at most one reload every 1.5 s, and none while the page is hidden.
  document.addEventListener("baton:overview", function () {
    if (document.visibilityState !== "visible" || Date.now() - lastLoad < 1500) return;
    load();
  });

  // Pan with the mouse or a finger, zoom with the wheel, buttons or keys.
  var drag = null;
  box.addEventListener("pointerdown", function (e) {
    if (e.target.closest && e.target.closest("a")) return;
    drag = { x: e.clientX - tx, y: e.clientY - ty };
    box.setPointerCapture(e.pointerId);
  });
  box.addEventListener("pointermove", function (e) { if (drag) { tx = e.clientX - drag.x; ty = e.clientY - drag.y; apply(); } });
  box.addEventListener("pointerup", function () { drag = null; });
  box.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = box.getBoundingClientRect();
    zoomAt(e.deltaY < 0 ? 1.15 : 1 / 1.15, e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });
  function center(f) { zoomAt(f, box.clientWidth / 2, box.clientHeight / 2); }
  box.addEventListener("keydown", function (e) {
    if (e.target !== box) return;
    var step = 40, done = true;
    switch (e.key) {
      case "+": case "=": center(1.2); break;
      case "-": center(1 / 1.2); break;
      case "0": fit(+box.dataset.width || 1, +box.dataset.height || 1); break;
      case "ArrowLeft": tx += step; apply(); break;
      case "ArrowRight": tx -= step; apply(); break;
      case "ArrowUp": ty += step; apply(); break;
      case "ArrowDown": ty -= step; apply(); break;
      default: done = false;
    }
    if (done) e.preventDefault();
  });
  document.querySelectorAll("[data-zoom]").forEach(function (b) {
    b.addEventListener("click", function () {
      var z = b.dataset.zoom;
      if (z === "in") center(1.2); else if (z === "out") center(1 / 1.2); else fit(+box.dataset.width || 1, +box.dataset.height || 1);
    });
  });
})();
