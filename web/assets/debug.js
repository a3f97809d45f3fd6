// The operator's /debug page: the worker's typed statistics, live (GET /debug/stream
// sends the /debug.json snapshot each second), with trends, the session actors and the
// figures of every component.

import {path, postJSON} from "./api.js";
import {ActorDetail} from "./actor-detail.js";
import {ActorTable} from "./actors.js";
import {Sparkline} from "./charts.js";
import {byId, replace} from "./dom.js";
import {Figures} from "./figures.js";
import {duration} from "./format.js";
import {listen} from "./live.js";

const charts = {};
let previous = null; // the last snapshot, for rates
let table;
let detail;
let figures;

function showError(error) {
  const box = byId("error");
  box.hidden = !error;
  replace(box, error ? String(error.message ?? error) : "");
}

function rate(now, before, pick) {
  const seconds = now.worker.uptimeSeconds - before.worker.uptimeSeconds;
  return seconds > 0 ? Math.max(0, pick(now) - pick(before)) / seconds : 0;
}

function update(snapshot) {
  const worker = snapshot.worker;
  replace(byId("worker"), `pid ${worker.pid} · ${worker.version} · up ${duration(worker.uptimeSeconds)} · `
    + `${worker.ready ? "ready" : "starting"} · ${worker.dataDir}`);
  if (previous && snapshot.worker.uptimeSeconds < previous.worker.uptimeSeconds) {
    Object.values(charts).forEach((chart) => chart.reset()); // another worker: counters began again
    previous = null;
  }
  if (previous) {
    charts.events.push(rate(snapshot, previous, (d) => d.sessions.delivered));
    charts.llm.push(rate(snapshot, previous, (d) => d.compressor.calls));
  }
  charts.queued.push(snapshot.sessions.queued);
  charts.pending.push(snapshot.journal.pending);
  previous = snapshot;
  table.update(snapshot.actors);
  figures.update(snapshot);
  detail.refresh();
}

async function replay(sessionId) {
  const status = byId("replay-status");
  try {
    const answer = await postJSON(path("/api/sessions/{id}/replay", {id: sessionId}));
    replace(status, `Session ${answer.claudeSessionId}: ${answer.replayed} parked event(s) queued again.`);
  } catch (error) {
    replace(status, `Replay of ${sessionId} failed: ${error.message}`);
  }
}

function start() {
  const chartBox = byId("charts");
  charts.events = new Sparkline(chartBox, {id: "events", title: "events delivered / s"});
  charts.queued = new Sparkline(chartBox, {id: "queued", title: "queued in mailboxes"});
  charts.pending = new Sparkline(chartBox, {id: "pending", title: "journal pending"});
  charts.llm = new Sparkline(chartBox, {id: "llm", title: "LLM calls / s"});
  figures = new Figures(byId("figures"));
  detail = new ActorDetail(byId("actor-detail"), {onClose: () => { detail.close(); table.select(null); }});
  table = new ActorTable(byId("actors"), {
    filter: byId("actor-filter"), failedOnly: byId("failed-only"), count: byId("actor-count"),
    onSelect: (id) => { table.select(id); detail.open(id); },
    onReplay: replay,
  });
  // The stream's first snapshot comes at once; then one a second.
  listen("/debug/stream", {snapshot: (snapshot) => { showError(null); update(snapshot); }}, {badge: byId("live")});
}

start();
