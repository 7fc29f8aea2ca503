// Baton dashboard: live updates over server-sent events. The pages are
// whole without this script; it keeps them current and measures itself:
// window.batonUpdates holds how long each update took to apply (ms,
// layout included), the last 1000.
(function () {
  "use strict";
  var body = document.body;
  var base = body.dataset.base;
  var stream = body.dataset.stream;
  var live = document.getElementById("live");
  var updates = (window.batonUpdates = []);
  window.batonUpdateCount = 0;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function cell(tr, text, cls) { var td = el("td", cls ? { class: cls } : null, text); tr.appendChild(td); return td; }
  function taskLink(id) { return el("a", { href: base + "task?id=" + encodeURIComponent(id), title: id }, id.length > 64 ? id.substring(0, 64) + "…" : id); }
  function poolLabel(p) { return p === "" ? "default" : p; }
  function clock(t) {
    if (!t || t.indexOf("0001-") === 0) return "before the dashboard";
    var d = new Date(t);
    return d.toISOString().substring(11, 23);
  }
  function dur(s) {
    if (s >= 60) return Math.round(s) + "s";
    if (s >= 1) return s.toFixed(2) + "s";
    if (s >= 0.001) return (s * 1000).toFixed(2) + "ms";
    return (s * 1e6).toFixed(1) + "µs";
  }
  function rate(f) { return f >= 100 ? f.toFixed(0) : f.toFixed(1); }
  function replaceRows(tbody, rows, empty, cols) {
    var frag = document.createDocumentFragment();
    rows.forEach(function (tr) { frag.appendChild(tr); });
    if (!rows.length && empty) { var tr = el("tr"); var td = cell(tr, empty); td.colSpan = cols; frag.appendChild(tr); }
    tbody.replaceChildren(frag);
  }
  function notice(text) {
    var n = document.getElementById("notice");
    if (!n) return;
    n.textContent = text; n.hidden = !text;
  }

  // ---- overview and pools ----
  var receivedAt = 0;
  var last = {}; // each section's data at its last render: an unchanged one is not redrawn
  function changed(name, data) {
    var k = JSON.stringify(data);
    if (last[name] === k) return false;
    last[name] = k;
    return true;
  }
  function applyOverview(v) {
    receivedAt = performance.now();
    document.querySelectorAll("[data-count]").forEach(function (e) {
      var n = v.counts[e.dataset.count];
      if (n !== undefined && e.textContent !== String(n)) e.textContent = n;
    });
    var pools = document.getElementById("pools");
    if (pools && changed("pools", v.pools)) {
      var table = document.getElementById("pools-table");
      var actions = table && table.dataset.actions === "on";
      var from = table ? table.dataset.from : "pools";
      var active = document.activeElement, focusPool = null;
      if (active && pools.contains(active)) focusPool = active.closest("tr").dataset.pool;
      replaceRows(pools, (v.pools || []).map(function (p) {
        var tr = el("tr", { "data-pool": p.name });
        if (p.paused) tr.className = "paused";
        var th = el("th", { scope: "row" });
        th.appendChild(el("a", { href: base + "tasks?" + p.tasksQuery }, p.label));
        tr.appendChild(th);
        cell(tr, String(p.size));
        cell(tr, "").appendChild(p.paused ? el("span", { class: "badge paused-badge" }, "paused") : el("span", { class: "badge" }, "running"));
        cell(tr, p.limitText);
        [p.busy + "%", p.counts.running, p.waiting, p.oldestWait || "", p.counts.pending, rate(p.startedPerMin), rate(p.finishedPerMin),
          rate(p.failedPerMin), p.totals.succeeded, p.totals.failed, p.totals.retries].forEach(function (x) { cell(tr, String(x)); });
        if (actions) cell(tr, "").appendChild(poolForm(p, from));
        return tr;
      }));
      if (focusPool !== null) { // keep the keyboard where it was
        pools.querySelectorAll("tr").forEach(function (tr) {
          var b = tr.querySelector("button");
          if (tr.dataset.pool === focusPool && b) b.focus();
        });
      }
    }
    var pausedNote = document.getElementById("paused-pools");
    if (pausedNote && changed("paused", v.paused)) {
      pausedNote.hidden = !(v.paused && v.paused.length);
      document.getElementById("paused-list").textContent = (v.paused || []).join(", ");
    }
    var running = document.getElementById("running");
    if (running && changed("running", v.running)) {
      replaceRows(running, (v.running || []).map(function (a) {
        var tr = el("tr");
        cell(tr, "", "id").appendChild(taskLink(a.id));
        cell(tr, poolLabel(a.pool));
        cell(tr, a.for ? clock(a.start) : "unknown");
        cell(tr, a.for || "unknown");
        return tr;
      }));
      document.getElementById("running-cap").textContent = v.runningText;
    }
    var failures = document.getElementById("failures");
    if (failures && changed("failures", v.failures)) {
      replaceRows(failures, (v.failures || []).map(function (a) {
        var tr = el("tr");
        cell(tr, "", "id").appendChild(taskLink(a.id));
        cell(tr, poolLabel(a.pool)); cell(tr, String(a.attempt)); cell(tr, a.outcome); cell(tr, a.err, "err"); cell(tr, clock(a.at));
        return tr;
      }), "None yet.", 6);
    }
    var svg = document.getElementById("rate");
    if (svg && changed("rate", v.rate)) {
      var rects = svg.querySelectorAll("#bars rect.ok, #bars rect.bad");
      var titles = svg.querySelectorAll("#bars title");
      (v.rate || []).forEach(function (r, i) {
        var h = v.rateMax ? Math.floor(120 * r.finished / v.rateMax) : 0;
        var fh = v.rateMax ? Math.floor(120 * r.failed / v.rateMax) : 0;
        var a = rects[2 * i], b = rects[2 * i + 1];
        if (!a || !b) return;
        if (titles[i]) titles[i].textContent = clock(r.t) + ": " + r.finished + " ended, " + r.failed + " failed";
        a.setAttribute("y", 120 - h); a.setAttribute("height", h);
        b.setAttribute("y", 120 - fh); b.setAttribute("height", fh);
      });
      document.getElementById("rate-text").textContent = v.rateText;
    }
    document.dispatchEvent(new CustomEvent("baton:overview", { detail: v }));
  }
  // A pool's pause or resume form, as the template makes it.
  function poolForm(p, from) {
    var verb = p.paused ? "Resume" : "Pause";
    var f = el("form", { method: "post", action: base + "pools/" + verb.toLowerCase(), class: "pool-action" });
    f.appendChild(el("input", { type: "hidden", name: "pool", value: p.name }));
    f.appendChild(el("input", { type: "hidden", name: "from", value: from }));
    f.appendChild(el("button", { type: "submit", "aria-label": verb + " pool " + p.label }, verb));
    return f;
  }
  // Pause and resume without leaving the page: the row changes with the
  // stream. Without the stream (or fetch) the form posts as it is.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains("pool-action") || !stream || !window.fetch) return;
    ev.preventDefault();
    var button = form.querySelector("button");
    button.disabled = true;
    var label = button.getAttribute("aria-label");
    fetch(form.action, { method: "POST", body: new URLSearchParams(new FormData(form)), headers: { Accept: "application/json" } })
      .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, j: j }; }); })
      .then(function (res) {
        if (res.ok) { notice((res.j.paused ? "Paused" : "Resumed") + " pool " + poolLabel(res.j.pool) + "."); }
        else { notice(res.j.error || label + " failed."); button.disabled = false; }
      })
      .catch(function (e) { notice(label + " failed: " + e); button.disabled = false; });
  });

  // "Running for" ticks between updates.
  setInterval(function () {
    if (!receivedAt) return;
    var extra = (performance.now() - receivedAt) / 1000;
    document.querySelectorAll("td[data-for]").forEach(function (td) {
      td.textContent = dur(parseFloat(td.dataset.for) + extra);
    });
  }, 1000);

  // ---- task ----
  function applyTask(t) {
    var st = document.getElementById("t-status");
    if (!st) return;
    if (st.textContent !== t.status) { st.textContent = t.status; st.className = "status st-" + t.status; }
    document.getElementById("t-joining").hidden = !t.joining;
    document.getElementById("t-attempts").textContent = t.attempts;
    document.getElementById("t-runs").textContent = t.runs;
    var box = document.getElementById("t-error-box");
    box.hidden = !t.err;
    document.getElementById("t-error").textContent = t.err || "";
    var form = document.getElementById("cancel-form");
    if (form && !t.canCancel) form.remove();
    var reruns = document.getElementById("t-reruns");
    if (reruns) reruns.textContent = t.reruns;
    var next = document.getElementById("t-next");
    if (next) next.textContent = t.next || "none planned";
    var hist = document.getElementById("t-history");
    if (hist && changed("history", t.history)) {
      var open = {};
      hist.querySelectorAll("details[open]").forEach(function (d) { open[d.dataset.key] = true; });
      while (hist.firstChild) hist.removeChild(hist.firstChild);
      (t.history || []).forEach(function (a) {
        var key = a.run + "/" + a.attempt + "/" + a.rerun;
        var d = el("details", { class: "attempt", "data-key": key });
        if (open[key] || (a.err && !Object.keys(open).length)) d.open = true;
        var s = el("summary");
        s.appendChild(el("span", { class: "status st-" + a.outcome }, a.outcome));
        s.appendChild(document.createTextNode(" run " + a.run + ", attempt " + a.attempt + (a.rerun ? ", re-run " + a.rerun : "") +
          " · started " + (a.start && a.start.indexOf("0001-") !== 0 ? clock(a.start) : "unknown") + " · " +
          (a.end && a.end.indexOf("0001-") !== 0 ? "took " : "running for ") + a.duration + (a.worker ? " · " + a.worker : "")));
        d.appendChild(s);
        if (a.err) d.appendChild(el("pre", { class: "err" }, a.err));
        if (a.logs && a.logs.length) {
          var ol = el("ol", { class: "logs" });
          a.logs.forEach(function (l) {
            var li = el("li");
            li.appendChild(el("time", {}, clock(l.time))); li.appendChild(document.createTextNode(" "));
            li.appendChild(el("span", { class: "lvl" }, l.level)); li.appendChild(document.createTextNode(" "));
            li.appendChild(el("span", { class: "msg" }, l.msg));
            if (l.attrs) { li.appendChild(document.createTextNode(" ")); li.appendChild(el("span", { class: "attrs" }, l.attrs)); }
            ol.appendChild(li);
          });
          d.appendChild(ol);
        }
        hist.appendChild(d);
      });
      if (!(t.history || []).length) hist.appendChild(el("p", {}, "No attempt yet."));
    }
    if (t.childCount > 0 || childrenShown) refreshChildren(t.id);
  }

  // Spawned children: the live update says how many; their rows come
  // from the task's JSON, one fetch at a time.
  var childrenFetch = null;
  var childrenShown = !!document.querySelector("#t-children a"); // rows that may have to go
  function refreshChildren(id) {
    var box = document.getElementById("t-children-box");
    if (!box || childrenFetch || !window.fetch) return;
    childrenFetch = fetch(base + "task?id=" + encodeURIComponent(id), { headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (full) {
        childrenFetch = null;
        if (!full) return;
        box.hidden = full.childCount === 0;
        var cap = document.getElementById("t-children-count");
        cap.textContent = full.childCount + " task(s) its attempts spawned; its dependents wait for all of them.";
        var rows = (full.children || []).map(function (c) {
          var tr = el("tr");
          var td = el("td"); td.appendChild(taskLink(c.id)); tr.appendChild(td);
          var st = el("td"); st.appendChild(el("span", { class: "status st-" + c.status }, c.status)); tr.appendChild(st);
          cell(tr, c.cause || "");
          return tr;
        });
        if (full.childMore) { var more = el("tr"); more.appendChild(el("td", { colspan: "3" }, "More not shown.")); rows.push(more); }
        replaceRows(document.getElementById("t-children"), rows, "None held: forgotten by retention.", 3);
        childrenShown = rows.length > 0;
      })
      .catch(function () { childrenFetch = null; });
  }

  // Cancel without leaving the page: the status changes with the stream.
  var cancelForm = document.getElementById("cancel-form");
  if (cancelForm && window.fetch) {
    cancelForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var button = cancelForm.querySelector("button");
      button.disabled = true;
      fetch(cancelForm.action, { method: "POST", body: new URLSearchParams(new FormData(cancelForm)), headers: { Accept: "application/json" } })
        .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, j: j }; }); })
        .then(function (res) {
          if (res.ok) { notice("Cancel asked: a running task ends Cancelled once its function returns."); }
          else { notice(res.j.error || "Cancel failed."); button.disabled = false; }
        })
        .catch(function (e) { notice("Cancel failed: " + e); button.disabled = false; });
    });
  }

  function timed(fn) {
    return function (e) {
      var t0 = performance.now();
      fn(JSON.parse(e.data));
      void document.body.offsetHeight; // style and layout, in the measure
      var dt = performance.now() - t0;
      updates.push(dt);
      if (updates.length > 1000) updates.shift();
      window.batonUpdateCount++;
    };
  }

  if (stream && window.EventSource) {
    var es = new EventSource(base + stream);
    es.addEventListener("overview", timed(applyOverview));
    es.addEventListener("task", timed(applyTask));
    es.addEventListener("gone", function () { notice("This task is no longer known to the scheduler (forgotten by retention)."); });
    es.onopen = function () { if (live) { live.textContent = "live"; live.classList.add("on"); } };
    es.onerror = function () { if (live) { live.textContent = "reconnecting…"; live.classList.remove("on"); } };
    window.addEventListener("pagehide", function () { es.close(); });
  }
})();
