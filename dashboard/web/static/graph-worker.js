// Baton dashboard: lays a graph out with dagre off the page's thread, so
// that a large neighbourhood never blocks the page. The page posts
// {dagre: URL} once, then {id, nodes: [{w, h}], edges: [[from, to]]};
// the worker answers {id, nodes: [{x, y}], edges: [[x, y, ...]], width,
// height}.
/* global dagre, importScripts */
"use strict";
self.onmessage = function (ev) {
  var m = ev.data;
  if (m.dagre) { importScripts(m.dagre); return; }
  var g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(function () { return {}; });
  m.nodes.forEach(function (n, i) { g.setNode(String(i), { width: n.w, height: n.h }); });
  m.edges.forEach(function (e) { g.setEdge(String(e[0]), String(e[1])); });
  dagre.layout(g);
  var out = { id: m.id, nodes: [], edges: [], width: g.graph().width || 1, height: g.graph().height || 1 };
  m.nodes.forEach(function (n, i) { var p = g.node(String(i)); out.nodes.push({ x: p.x, y: p.y }); });
  m.edges.forEach(function (e) {
    var pts = g.edge(String(e[0]), String(e[1])).points, flat = [];
    pts.forEach(function (p) { flat.push(+p.x.toFixed(1), +p.y.toFixed(1)); });
    out.edges.push(flat);
  });
  self.postMessage(out);
};
