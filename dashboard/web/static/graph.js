// Baton dashboard: the graph page. It groups what would crowd the
// drawing (a spawned family, or a run of tasks of one shape: the same
// dependencies and dependents) into one node a click opens, lays the rest
// out with dagre in a Web Worker (graph-worker.js) so that the page never
// blocks, draws SVG links, zooms and pans, recolours as the live stream
// reports changes, and keeps what the reader looks at in place when the
// set of tasks changes.
(function () {
  "use strict";
  var box = document.getElementById("graph");
  if (!box) return;
  var base = document.body.dataset.base;
  var query = box.dataset.query;
  var NS = "http://www.w3.org/2000/svg";
  var GROUP_MIN = 6; // more members than this are drawn as one group
  var MIN_FIT = 0.45; // fitting never shrinks text below this: a large graph is centred on its roots instead
  var svg, view, scale = 1, tx = 0, ty = 0, laidOut = "", drawn = {}, pos = {}, expanded = {}, last = null;
  var tools = document.querySelector(".graph-tools");
  if (tools) tools.hidden = false;

  var worker = null, pending = {}, seq = 0;
  try {
    worker = new Worker(base + box.dataset.worker);
    worker.postMessage({ dagre: new URL(base + box.dataset.dagre, location.href).href });
    worker.onmessage = function (ev) { var f = pending[ev.data.id]; delete pending[ev.data.id]; if (f) f(ev.data); };
  } catch (e) { worker = null; }
  function layout(nodes, edges, done) {
    if (worker) { var id = ++seq; pending[id] = done; worker.postMessage({ id: id, nodes: nodes, edges: edges }); return; }
    if (!window.dagre) return; // no worker, no dagre: the list below the graph says it all
    var g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, marginx: 10, marginy: 10 });
    g.setDefaultEdgeLabel(function () { return {}; });
    nodes.forEach(function (n, i) { g.setNode(String(i), { width: n.w, height: n.h }); });
    edges.forEach(function (e) { g.setEdge(String(e[0]), String(e[1])); });
    dagre.layout(g);
    done({ nodes: nodes.map(function (n, i) { var p = g.node(String(i)); return { x: p.x, y: p.y }; }),
      edges: edges.map(function (e) { var f = []; g.edge(String(e[0]), String(e[1])).points.forEach(function (p) { f.push(p.x, p.y); }); return f; }),
      width: g.graph().width || 1, height: g.graph().height || 1 });
  }

  function s(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function short(id) { return id.length > 28 ? id.substring(0, 27) + "…" : id; }
  function apply() { if (view) view.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + scale + ")"); }
  function zoomAt(f, cx, cy) {
    var ns = Math.min(4, Math.max(0.05, scale * f));
    f = ns / scale;
    tx = cx - (cx - tx) * f; ty = cy - (cy - ty) * f; scale = ns;
    apply();
  }
  // fit shows the whole graph if that keeps it readable, else the roots at
  // a readable scale, in the middle.
  function fit() {
    var w = +box.dataset.width || 1, h = +box.dataset.height || 1;
    var bw = box.clientWidth, bh = box.clientHeight;
    scale = Math.min(1.5, Math.min(bw / (w + 40), bh / (h + 40)));
    if (scale >= MIN_FIT) { tx = (bw - w * scale) / 2; ty = (bh - h * scale) / 2; apply(); return; }
    scale = MIN_FIT;
    var cx = w / 2, cy = h / 2, k = 0, sx = 0, sy = 0;
    Object.keys(drawn).forEach(function (key) { if (drawn[key].root && pos[key]) { sx += pos[key].x; sy += pos[key].y; k++; } });
    if (k) { cx = sx / k; cy = sy / k; }
    tx = bw / 2 - cx * scale; ty = bh / 2 - cy * scale;
    apply();
  }

  var rank = { failed: 0, running: 1, cancelled: 2, ready: 3, pending: 4, skipped: 5, succeeded: 6 };
  // group folds families and runs of one shape into group nodes, unless
  // opened; it returns the nodes and edges to draw.
  function group(g) {
    var n = g.nodes.length, preds = [], succs = [], of = new Array(n), groups = [];
    for (var i = 0; i < n; i++) { preds.push([]); succs.push([]); of[i] = -1; }
    g.edges.forEach(function (e) { succs[e[0]].push(e[1]); preds[e[1]].push(e[0]); });
    function fold(key, label, members) {
      if (members.length <= GROUP_MIN || expanded[key]) return;
      var gi = groups.length, counts = {};
      members.forEach(function (m) { of[m] = gi; counts[g.nodes[m].status] = (counts[g.nodes[m].status] || 0) + 1; });
      var worst = Object.keys(counts).sort(function (a, b) { return rank[a] - rank[b]; })[0];
      groups.push({ key: key, label: label, members: members, counts: counts, status: worst });
    }
    var byParent = {};
    g.nodes.forEach(function (x, i) { if (x.parent && !x.root) (byParent[x.parent] = byParent[x.parent] || []).push(i); });
    Object.keys(byParent).forEach(function (p) { fold("f:" + p, "family of " + short(p), byParent[p]); });
    var byShape = {};
    g.nodes.forEach(function (x, i) {
      if (of[i] >= 0 || x.root) return;
      var k = preds[i].slice().sort().join(",") + "|" + succs[i].slice().sort().join(",");
      (byShape[k] = byShape[k] || []).push(i);
    });
    Object.keys(byShape).forEach(function (k) {
      var m = byShape[k];
      fold("s:" + g.nodes[m[0]].id, m.length + " tasks like " + short(g.nodes[m[0]].id), m);
    });
    // Long runs: chains of tasks with one dependency and one dependent
    // each, drawn in the graph, folded into one node.
    var inChain = new Array(n);
    g.nodes.forEach(function (x, i) {
      if (of[i] >= 0 || x.root || preds[i].length !== 1 || succs[i].length !== 1 || inChain[i]) return;
      var p = preds[i][0];
      if (of[p] < 0 && !g.nodes[p].root && preds[p].length === 1 && succs[p].length === 1) return; // not the run's first
      var run = [], k = i;
      while (of[k] < 0 && !g.nodes[k].root && preds[k].length === 1 && succs[k].length === 1 && !inChain[k]) {
        inChain[k] = true; run.push(k); k = succs[k][0];
      }
      fold("c:" + g.nodes[run[0]].id, run.length + " in a row: " + short(g.nodes[run[0]].id) + " … " + short(g.nodes[run[run.length - 1]].id), run);
    });
    var out = [], index = new Array(n), gindex = [];
    g.nodes.forEach(function (x, i) {
      if (of[i] >= 0) return;
      index[i] = out.length;
      out.push({ key: "t:" + x.id, id: x.id, status: x.status, attempts: x.attempts, root: x.root });
    });
    groups.forEach(function (gr, gi) {
      gindex[gi] = out.length;
      out.push({ key: gr.key, group: gr, status: gr.status });
    });
    var seen = {}, edges = [], byID = {};
    g.nodes.forEach(function (x, i) { byID[x.id] = i; });
    // A family hangs from its spawner.
    groups.forEach(function (gr, gi) {
      var p = gr.key.indexOf("f:") === 0 ? byID[gr.key.substring(2)] : undefined;
      if (p !== undefined) {
        var a = of[p] >= 0 ? gindex[of[p]] : index[p];
        seen[a + ">" + gindex[gi]] = true;
        edges.push([a, gindex[gi]]);
      }
    });
    g.edges.forEach(function (e) {
      var a = of[e[0]] >= 0 ? gindex[of[e[0]]] : index[e[0]], b = of[e[1]] >= 0 ? gindex[of[e[1]]] : index[e[1]];
      if (a === b || seen[a + ">" + b]) return;
      seen[a + ">" + b] = true;
      edges.push([a, b]);
    });
    return { nodes: out, edges: edges };
  }
  function sub(n) {
    if (n.group) {
      return Object.keys(n.group.counts).sort(function (a, b) { return rank[a] - rank[b]; })
        .map(function (st) { return n.group.counts[st] + " " + st; }).join(", ");
    }
    return n.status + (n.attempts > 1 ? " · " + n.attempts + " attempts" : "");
  }
  function title(n) { return n.group ? n.group.label + " (" + n.group.members.length + ")" : short(n.id); }

  function draw(g) {
    last = g;
    var d = group(g);
    var key = d.nodes.map(function (n) { return n.key; }).join("\u0000") + "|" + d.edges.join(";");
    if (key === laidOut) { // same drawing: recolour only
      d.nodes.forEach(function (n) {
        var e = drawn[n.key];
        if (!e) return;
        e.g.setAttribute("class", "node st-" + n.status + (n.root ? " root" : "") + (n.group ? " group" : ""));
        e.sub.textContent = sub(n);
      });
      return;
    }
    var dims = d.nodes.map(function (n) {
      var w = Math.max(title(n).length * 7.6, sub(n).length * 6.8);
      return { w: Math.max(90, w + 22), h: 44 };
    });
    box.dataset.busy = "1";
    layout(dims, d.edges, function (res) {
      if (last !== g) return; // a newer graph came meanwhile
      var first = laidOut === "", old = pos, anchor = null;
      laidOut = key;
      pos = {};
      d.nodes.forEach(function (n, i) { pos[n.key] = { x: res.nodes[i].x, y: res.nodes[i].y }; });
      // Keep the reader's place: a root, or else any task drawn before
      // and now, stays where it was on the screen.
      d.nodes.forEach(function (n) { if (!anchor && n.root && old[n.key]) anchor = n.key; });
      d.nodes.forEach(function (n) { if (!anchor && old[n.key]) anchor = n.key; });
      render(d, dims, res);
      if (first) fit();
      else {
        if (anchor) { tx += (old[anchor].x - pos[anchor].x) * scale; ty += (old[anchor].y - pos[anchor].y) * scale; }
        apply();
      }
      delete box.dataset.busy;
      box.dataset.ready = "1";
    });
  }

  function render(d, dims, res) {
    var fresh = s("svg", { role: "group", "aria-label": "Tasks and their dependencies" });
    var defs = s("defs");
    var marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
    marker.appendChild(s("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
    defs.appendChild(marker); fresh.appendChild(defs);
    var v = s("g");
    fresh.appendChild(v);
    res.edges.forEach(function (f) {
      var p = [];
      for (var i = 0; i < f.length; i += 2) p.push(f[i].toFixed(1) + "," + f[i + 1].toFixed(1));
      v.appendChild(s("path", { class: "edge", d: "M" + p.join(" L"), "marker-end": "url(#arrow)" }));
    });
    drawn = {};
    d.nodes.forEach(function (n, i) {
      var p = res.nodes[i], w = dims[i].w, h = dims[i].h;
      var a;
      if (n.group) {
        a = s("a", { href: "#", role: "button", "data-group": n.key, "aria-label": title(n) + ": " + sub(n) + ". Open the group" });
        a.addEventListener("click", function (ev) { ev.preventDefault(); expanded[n.key] = true; if (last) draw(last); });
      } else {
        a = s("a", { href: base + "task?id=" + encodeURIComponent(n.id), "data-id": n.id, "aria-label": n.id + ", " + n.status });
      }
      var gr = s("g", { class: "node st-" + n.status + (n.root ? " root" : "") + (n.group ? " group" : ""), transform: "translate(" + (p.x - w / 2) + "," + (p.y - h / 2) + ")" });
      gr.appendChild(s("title", null, n.group ? title(n) + ": " + sub(n) + " (click to open)" : n.id + " (" + n.status + ")"));
      if (n.group) gr.appendChild(s("rect", { class: "stack", x: 5, y: 5, width: w, height: h }));
      gr.appendChild(s("rect", { width: w, height: h }));
      gr.appendChild(s("text", { x: 10, y: 18 }, title(n)));
      var st = s("text", { class: "sub", x: 10, y: 35 }, sub(n));
      gr.appendChild(st);
      a.appendChild(gr);
      v.appendChild(a);
      drawn[n.key] = { a: a, g: gr, sub: st, root: n.root };
    });
    box.replaceChildren(fresh);
    svg = fresh; view = v;
    box.dataset.width = res.width; box.dataset.height = res.height;
    box.dataset.nodes = d.nodes.length;
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
      case "0": fit(); break;
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
      if (z === "in") center(1.2); else if (z === "out") center(1 / 1.2); else fit();
    });
  });
})();
