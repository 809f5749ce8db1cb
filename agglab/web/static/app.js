// The live page: draws the topology once (tiered positions from the server), then applies
// each sample of the stream (/api/stream, server-sent events) to it and to the tables.
// Actions go to /api/action, which runs the lab's own commands (agglab/actions.py).
"use strict";
const TOKEN = document.querySelector('meta[name="agglab-token"]').content;
const q = (path) => path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN);
const $ = (id) => document.getElementById(id);
const agglab = window.agglab = { cy: null, topology: null, state: null, seenDown: {}, seenEpoch: {}, samples: 0 };
let selected = null, treeKey = "";

function fmtRate(mbps) {
  if (mbps === null || mbps === undefined) return "";
  return mbps >= 1000 ? (mbps / 1000).toFixed(2) + " Gb/s" : mbps >= 0.05 ? mbps.toFixed(1) + " Mb/s" : "";
}

async function act(body) {
  $("message").className = ""; $("message").textContent = "…";
  try {
    const r = await fetch(q("/api/action"), { method: "POST", headers: { "Content-Type": "application/json" },
                                                body: JSON.stringify(body) });
    const j = await r.json();
    $("message").className = j.ok ? "" : "err";
    $("message").textContent = j.message || (j.ok ? "done" : "refused");
  } catch (e) { $("message").className = "err"; $("message").textContent = String(e); }
}

function build(topo) {
  agglab.topology = topo;
  $("name").textContent = topo.name;
  const sw = topo.nodes.filter(n => n.kind === "switch").length, hosts = topo.nodes.length - sw;
  $("counts").textContent = `${sw} switches, ${hosts} hosts`;
  const els = topo.nodes.map(n => ({ group: "nodes", data: { id: n.id, kind: n.kind, tier: n.tier,
    label: n.id + (n.rank !== null && n.rank !== undefined ? ` (r${n.rank})` : "") },
    position: { x: n.x, y: n.y }, classes: n.kind + (n.rank !== null && n.rank !== undefined ? " worker" : "") }));
  topo.links.forEach(l => els.push({ group: "edges", data: { id: l.id, source: l.a, target: l.b, link: l.id,
    bw: l.bw, label: "" }, classes: "link" }));
  agglab.cy = cytoscape({
    container: $("cy"), elements: els, layout: { name: "preset" }, wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: { "label": "data(label)", "font-size": 10, "text-valign": "center",
        "text-halign": "center", "background-color": "#fff", "border-width": 1, "border-color": "#333",
        "width": 34, "height": 22, "shape": "round-rectangle" } },
      { selector: "node.host", style: { "shape": "rectangle", "border-color": "#bbb", "color": "#999", "width": 40 } },
      { selector: "node.worker", style: { "background-color": "#e8f0ff", "border-color": "#333", "color": "#000" } },
      { selector: "node.root", style: { "border-width": 4, "border-style": "double", "font-weight": "bold" } },
      { selector: "node.dead", style: { "background-color": "#f3c6c6", "border-style": "dashed", "color": "#a00" } },
      { selector: "node:selected", style: { "overlay-opacity": 0.15 } },
      { selector: "edge", style: { "curve-style": "bezier", "control-point-step-size": 6 } },
      { selector: "edge.link", style: { "line-color": "#c8c8c8", "width": 1.5, "label": "data(label)",
        "font-size": 8, "color": "#555", "text-rotation": "autorotate", "text-background-color": "#fff",
        "text-background-opacity": 0.7 } },
      { selector: "edge.link.busy", style: { "line-color": "#999" } },
      { selector: "edge.down", style: { "line-style": "dashed", "line-color": "#000", "width": 2 } },
      { selector: "edge.tree", style: { "width": 3, "line-color": "data(colour)", "events": "yes" } },
    ],
  });
  stretch();
  window.addEventListener("resize", () => { agglab.cy.resize(); agglab.cy.fit(undefined, 20); });
  agglab.cy.on("tap", "edge", (e) => {
    const id = e.target.data("link"), l = agglab.state && agglab.state.links.find(x => x.id === id);
    const [a, b] = id.split("-");
    act({ do: l && !l.up ? "recover" : "fail", a, b });
  });
  agglab.cy.on("tap", "node.switch", (e) => {
    selected = e.target.id(); $("selected").textContent = selected;
    $("kill").disabled = $("restart").disabled = false;
  });
  if (!topo.lab) { $("runform").style.display = "none"; }
}

// Tiers laid out by Graphviz are wide and flat: stretch them downwards (at most 3x) until the
// drawing has the box's proportions, so it fills the box instead of a band across it.
function stretch() {
  const cy = agglab.cy, bb = cy.nodes().boundingBox(), box = $("cy").getBoundingClientRect();
  if (!bb.h || !box.height) return;
  const k = Math.min(3, (bb.w / bb.h) / (box.width / box.height));
  if (k > 1) cy.nodes().positions(n => ({ x: n.position("x"), y: bb.y1 + (n.position("y") - bb.y1) * k }));
  cy.fit(undefined, 20);
}

function applyTrees(job) {
  const cy = agglab.cy;
  const key = job.epoch + ":" + job.trees.map(t => t.edges.join(",")).join("|");
  if (key === treeKey) return;
  treeKey = key;
  cy.batch(() => {
    cy.remove("edge.tree");
    cy.nodes().removeClass("root");
    job.trees.forEach(t => {
      cy.$id(t.root).addClass("root").style("border-color", t.colour);
      t.edges.forEach(id => {
        const base = cy.$id(id);
        if (base.empty()) return;
        cy.add({ group: "edges", data: { id: `t${t.index}:${id}`, source: base.data("source"),
          target: base.data("target"), link: id, colour: t.colour, tree: t.index }, classes: "tree" });
      });
    });
  });
}

function row(cells, cls) {
  const tr = document.createElement("tr");
  if (cls) tr.className = cls;
  cells.forEach(c => { const td = document.createElement("td"); td.textContent = c === null || c === undefined ? "–" : c;
    tr.appendChild(td); });
  return tr;
}
function fill(id, rows) { const tb = $(id).querySelector("tbody"); tb.replaceChildren(...rows); }

function apply(s) {
  agglab.state = s; agglab.samples += 1;
  if (s.error) { $("message").className = "err"; $("message").textContent = s.error; return; }
  const cy = agglab.cy, now = Date.now();
  cy.batch(() => {
    s.links.forEach(l => {
      const e = cy.$id(l.id);
      e.toggleClass("down", !l.up);
      if (!l.up && !(l.id in agglab.seenDown)) agglab.seenDown[l.id] = now;
      if (l.up) delete agglab.seenDown[l.id];
      const bw = e.data("bw");
      e.data("label", (l.up ? "" : "DOWN ") + (fmtRate(l.mbps) || (bw ? fmtRate(bw) : "")));
      e.toggleClass("busy", (l.mbps || 0) > 0.05);
      e.style("width", 1.5 + 6 * (l.util || 0));
    });
    cy.nodes("node.switch").forEach(n => n.toggleClass("dead", s.dead.includes(n.id())));
  });
  const job = s.jobs[0];
  if (job) {
    applyTrees(job);
    if (!(job.epoch in agglab.seenEpoch)) agglab.seenEpoch[job.epoch] = now;
    $("epoch").textContent = `epoch ${job.epoch}` + (s.jobs.length > 1 ? ` (job ${job.job}; ${s.jobs.length} jobs)` : "")
      + (job.partitioned ? " PARTITIONED" : "");
    $("trees").replaceChildren(...s.jobs.flatMap(j => j.trees.map(t => {
      const d = document.createElement("div"); d.className = "treeitem"; d.dataset.edges = t.edges.join(" ");
      d.innerHTML = `<span class="swatch" style="background:${t.colour}"></span>`;
      d.append(`${s.jobs.length > 1 ? "job " + j.job + " " : ""}${t.name}: ${(100 * t.weight).toFixed(1)}% of the gradient, ` +
               `root ${t.root}, ${t.slots} slots, ${j.tree || "IP routes"}, ${j.algorithm}, epoch ${j.epoch}`);
      return d; })));
  }
  const r = s.run;
  $("runline").textContent = r.running ? `allreduce running: ${r.done}/${r.total || "?"} blocks` +
    (r.total ? ` (${Math.round(100 * r.done / r.total)}%)` : "") + (r.eta !== null ? `, ETA ${r.eta} s` : "")
    : (r.outcome ? r.outcome.split("\n")[0] : "no allreduce running");
  $("runline").dataset.running = r.running ? "1" : "0";
  $("bar").style.width = r.total ? `${100 * r.done / r.total}%` : "0";
  fill("reroutes", s.reroutes.map(x => row([x.link || ("switch " + x.switch), x.epoch, x.detect_ms, x.recompute_ms,
    x.install_ms, x.freeze_ms, x.snapshot_ms, x.entries_ms, x.preload_ms])));
  fill("workers", s.workers.map(w => row([w.rank, w.host, w.total ? `${w.done}/${w.total}` : w.done, w.rate,
    w.retransmissions])));
  fill("switches", Object.entries(s.switches).map(([name, sw]) => {
    if (!sw.alive) return row([name, "dead"], "dead");
    const c = sw.counters, why = Object.entries(c).filter(([k, v]) => k.startsWith("rejected_") && v)
      .map(([k, v]) => `${k.slice(9)} ${v}`).join(", ");
    return row([name, sw.slots_used === null ? null : `${sw.slots_used}/${sw.slots}`, c.contributions, c.completions,
      c.dup_dropped, c.dup_answered, c.rejected + (why ? ` (${why})` : "")]);
  }));
  const ev = $("events"), atEnd = ev.scrollTop + ev.clientHeight >= ev.scrollHeight - 4;
  // each event in words (as the lab prints it); its raw fields in its tooltip, and under it
  // when "raw fields" is ticked
  const showRaw = $("events-raw").checked;
  ev.replaceChildren(...s.events.map(e => {
    const line = document.createElement("span");
    line.className = "event";
    line.title = e.raw;
    line.textContent = `${e.text}\n` + (showRaw ? `${" ".repeat(13)}[${e.raw}]\n` : "");
    return line;
  }));
  if (atEnd) ev.scrollTop = ev.scrollHeight;
}

function connect() {
  const src = new EventSource(q("/api/stream"));
  src.onopen = () => { $("conn").textContent = "live"; $("conn").className = "ok"; };
  src.onmessage = (m) => apply(JSON.parse(m.data));
  src.onerror = () => { $("conn").textContent = "disconnected (the lab closed?)"; $("conn").className = "bad"; };
}

$("start").onclick = () => act({ do: "allreduce", elements: $("elements").value, algorithm: $("algorithm").value,
                                 tree: $("tree").value });
$("cancel").onclick = () => act({ do: "cancel" });
$("kill").onclick = () => selected && act({ do: "kill", switch: selected });
$("restart").onclick = () => selected && act({ do: "restart", switch: selected });
fetch(q("/api/topology")).then(r => r.json()).then(t => { build(t); connect(); });
