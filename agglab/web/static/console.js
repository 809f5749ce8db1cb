// The lab's command line on the live page: one typed line at a time to /api/command, which
// runs the lab's own commands (agglab/lab_console.py); each command's output is shown below
// it, in the order typed. Up/down arrows recall earlier lines (kept for this browser tab).
"use strict";
(() => {
  const token = document.querySelector('meta[name="agglab-token"]').content;
  const box = document.getElementById("console");
  box.innerHTML = '<h3>Command line</h3><pre id="console-out"></pre>' +
    '<div id="console-line"><span>agglab&gt;</span><input id="console-in" type="text" autocomplete="off" ' +
    'spellcheck="false" placeholder="help, allreduce 200000, fail A B, events, …"></div>';
  const out = document.getElementById("console-out"), input = document.getElementById("console-in");
  const history = [];
  let back = 0, draft = "", queue = Promise.resolve(), awaiting = null, inFlight = 0;

  // what a test (or a person in the devtools) reads: every command and its output, in order
  const log = window.agglabConsole = { entries: [] };

  function block(command, label) {
    const div = document.createElement("div");
    div.className = "entry";
    const head = document.createElement("div");
    head.className = label ? "note" : "command"; head.textContent = label || "agglab> " + command;
    const body = document.createElement("div");
    body.className = "output pending"; body.textContent = "…";
    div.append(head, body);
    const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    out.appendChild(div);
    if (atEnd) out.scrollTop = out.scrollHeight;
    const entry = { command, output: null, ok: null, status: null };
    log.entries.push(entry);
    return (text, ok, status) => {
      body.textContent = text; body.className = "output" + (ok ? "" : " err");
      Object.assign(entry, { output: text, ok, status });
      out.scrollTop = out.scrollHeight;
    };
  }

  const runs = () => { const s = window.agglab && window.agglab.state; return s && s.run ? s.run.runs : 0; };

  async function send(command, done) {
    inFlight += 1;
    const runsBefore = runs();
    try {
      const r = await fetch("/api/command?token=" + encodeURIComponent(token), { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ line: command }) });
      const j = await r.json().catch(() => ({ ok: false, message: `HTTP ${r.status}` }));
      done(j.ok ? j.output : j.message, j.ok, r.status);
      const word = command.trim().split(/\s+/)[0];
      if (j.ok && word === "allreduce" && /started/.test(j.output)) awaiting = runsBefore;
      if (word === "wait" || word === "cancel") awaiting = null;   // their output has the outcome
    } catch (e) {
      done(`the lab did not answer (${e}): closed?`, false, 0);
    } finally { inFlight -= 1; }
  }

  function submit() {
    const command = input.value;
    if (!command.trim()) return;
    if (history[history.length - 1] !== command) history.push(command);
    back = 0; draft = ""; input.value = "";
    const done = block(command);
    queue = queue.then(() => send(command, done));      // in the order typed, one at a time
  }

  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); submit(); return; }
    if (e.key !== "ArrowUp" && e.key !== "ArrowDown") return;
    e.preventDefault();
    if (back === 0) draft = input.value;
    back = e.key === "ArrowUp" ? Math.min(history.length, back + 1) : Math.max(0, back - 1);
    input.value = back === 0 ? draft : history[history.length - back];
    input.setSelectionRange(input.value.length, input.value.length);
  });

  // an allreduce started here ends in the background: its outcome (the lab's terminal prints
  // it too) is shown here once the page's samples say it ended, unless `wait` already did; a
  // sample counting more runs than before it started and none running is past its end
  setInterval(() => {
    const topo = window.agglab && window.agglab.topology;
    if (topo && !topo.lab) box.style.display = "none";       // `agglab allreduce --web`: no lab to type to
    const run = window.agglab && window.agglab.state && window.agglab.state.run;
    if (awaiting === null || inFlight || !run || run.running || run.runs <= awaiting || !run.outcome) return;
    awaiting = null;
    block(null, "(the allreduce started here has ended:)")(run.outcome, !/NOT EXACT|failed/.test(run.outcome), 200);
  }, 250);
})();
