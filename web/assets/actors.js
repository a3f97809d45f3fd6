// The /debug page's table of session actors: sortable (click a heading), filterable,
// failed sessions marked with a Replay button; a click on a row selects the actor.
// Rows are kept and their cells updated in place, so a click is never lost to a redraw.
// At most ROWS_SHOWN rows are drawn (the first in the chosen order; the filter reaches the
// others): 1,500 actors redrawn every second hold the browser for 730 ms.

import {h, replace} from "./dom.js";
import {ago, counts, duration, number} from "./format.js";

export const ROWS_SHOWN = 200;

const text = (value) => (value === null || value === undefined || value === "" ? "–" : String(value));

// key: what sorting compares; show: what the cell says; render (if any): how it says it.
export const COLUMNS = [
  {key: "claudeSessionId", label: "session", show: (a) => a.claudeSessionId,
    render: (a) => h("span", {title: a.claudeSessionId}, a.claudeSessionId.length > 14 ? `${a.claudeSessionId.slice(0, 13)}…` : a.claudeSessionId)},
  {key: "project", label: "project", show: (a) => text(a.project)},
  {key: "state", label: "state", show: (a) => a.state},
  {key: "mailboxDepth", label: "mailbox", show: (a) => `${number(a.mailboxDepth)} / ${number(a.mailboxCapacity)}`},
  {key: "peakDepth", label: "peak", show: (a) => number(a.peakDepth)},
  {key: "queued", label: "queued", show: (a) => number(a.queued)},
  {key: "processed", label: "processed", show: (a) => `${number(a.processed)} · ${counts(a.processedByKind)}`,
    render: (a) => [number(a.processed), h("div", {class: "note"}, counts(a.processedByKind))]},
  {key: "restarts", label: "restarts", show: (a) => number(a.restarts)},
  {key: "lastError", label: "last error", show: (a) => (a.lastError ? `${a.lastError} (${ago(a.lastErrorAt)})` : "–")},
  {key: "idleSeconds", label: "idle", show: (a) => duration(a.idleSeconds)},
];

function compare(a, b, key) {
  const x = a[key];
  const y = b[key];
  if (typeof x === "number" && typeof y === "number") return x - y;
  return String(x ?? "").localeCompare(String(y ?? ""));
}

export class ActorTable {
  constructor(table, {filter, failedOnly, count, onSelect, onReplay}) {
    this.body = table.tBodies[0];
    this.filter = filter;
    this.failedOnly = failedOnly;
    this.count = count;
    this.onSelect = onSelect;
    this.onReplay = onReplay;
    this.sort = {key: "state", descending: false};
    this.rows = new Map(); // session id -> <tr>
    this.actors = [];
    this.selected = null;
    this.headings = COLUMNS.map((column) => h("th", {
      scope: "col", tabindex: 0, dataset: {key: column.key}, "aria-sort": "none",
      on: {click: () => this.sortBy(column.key), keydown: (e) => { if (e.key === "Enter") this.sortBy(column.key); }},
    }, column.label));
    replace(table.tHead, h("tr", {}, this.headings, h("th", {scope: "col"}, "")));
    filter.addEventListener("input", () => this.draw());
    failedOnly.addEventListener("change", () => this.draw());
  }

  sortBy(key) {
    this.sort = {key, descending: this.sort.key === key ? !this.sort.descending : false};
    this.draw();
  }

  select(sessionId) {
    this.selected = sessionId;
    for (const [id, row] of this.rows) row.classList.toggle("selected", id === sessionId);
  }

  update(actors) {
    this.actors = actors;
    this.draw();
  }

  visible() {
    const needle = this.filter.value.trim().toLowerCase();
    const shown = this.actors.filter((a) => (!this.failedOnly.checked || a.state === "failed") && (!needle ||
      [a.claudeSessionId, a.project, a.state, a.lastError].some((field) => String(field ?? "").toLowerCase().includes(needle))));
    const {key, descending} = this.sort;
    shown.sort((a, b) => (descending ? -1 : 1) * compare(a, b, key) || a.claudeSessionId.localeCompare(b.claudeSessionId));
    return shown;
  }

  draw() {
    for (const th of this.headings) {
      const sorted = th.dataset.key === this.sort.key;
      th.setAttribute("aria-sort", sorted ? (this.sort.descending ? "descending" : "ascending") : "none");
    }
    const shown = this.visible();
    const drawn = shown.slice(0, ROWS_SHOWN);
    const wanted = new Set(drawn.map((a) => a.claudeSessionId));
    for (const [id, row] of this.rows) {
      if (!wanted.has(id)) { // gone, filtered out or past the rows shown: made again if it comes back
        row.remove();
        this.rows.delete(id);
      }
    }
    const order = drawn.map((actor) => this.row(actor));
    const rows = this.body.rows;
    if (rows.length !== order.length || order.some((row, i) => rows[i] !== row)) {
      this.body.append(...order); // moves kept rows into order; focus and hover survive
    }
    const more = shown.length > drawn.length ? ` (the first ${drawn.length} shown: filter to find others)` : "";
    replace(this.count, `${shown.length} of ${this.actors.length}${more}`);
  }

  row(actor) {
    const id = actor.claudeSessionId;
    let row = this.rows.get(id);
    if (!row) {
      row = h("tr", {tabindex: 0, dataset: {session: id}, on: {
        click: (event) => { if (!event.target.closest("button")) this.onSelect(id); },
        keydown: (event) => { if (event.key === "Enter") this.onSelect(id); },
      }}, COLUMNS.map((column) => h("td", {dataset: {column: column.key}})), h("td", {class: "actions"}));
      this.rows.set(id, row);
    }
    row.dataset.state = actor.state;
    row.classList.toggle("failed", actor.state === "failed");
    row.classList.toggle("selected", id === this.selected);
    COLUMNS.forEach((column, i) => {
      const cell = row.cells[i];
      const value = column.show(actor);
      if (cell.dataset.text !== value) {
        cell.dataset.text = value;
        replace(cell, column.render ? column.render(actor) : value);
      }
    });
    const actions = row.cells[COLUMNS.length];
    const button = actions.querySelector("button");
    if (actor.state === "failed" && !button) {
      actions.append(h("button", {type: "button", class: "replay", title: `sessionmem replay ${id}`,
        on: {click: () => this.onReplay(id)}}, "Replay"));
    } else if (actor.state !== "failed" && button) {
      button.remove();
    }
    return row;
  }
}
