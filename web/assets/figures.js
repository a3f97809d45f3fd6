// The /debug page's figure cards: each a section of the snapshot, every field shown.
// A field added to a statistics record appears here without a change to this page.

import {h, replace} from "./dom.js";
import {ago, bytes, number, words} from "./format.js";

const without = (record, ...names) =>
  record ? Object.fromEntries(Object.entries(record).filter(([name]) => !names.includes(name))) : record;

// [section id, title, the record in a snapshot, what to say when it is null]
const SECTIONS = [
  ["sessions", "Sessions", (d) => d.sessions],
  ["supervisor", "Supervisor", (d) => d.supervisor],
  ["journal", "Journal", (d) => d.journal],
  ["writer", "Writer (group commit)", (d) => d.store.writer],
  ["checkpointer", "Checkpointer", (d) => d.store.checkpointer],
  ["reads", "Gathered reads (file recall)", (d) => d.store.gatheredReads],
  ["recallCache", "File recall's kept rows", (d) => d.store.fileRecallCache],
  ["compressor", "Compressor", (d) => without(d.compressor, "breaker", "budget")],
  ["breaker", "LLM breaker", (d) => d.compressor.breaker, "offline: no LLM calls"],
  ["budget", "LLM budget", (d) => d.compressor.budget, "offline: no LLM tokens"],
  ["index", "Vector index", (d) => d.index],
  ["embedder", "Embedder", (d) => ({...without(d.embedder, "embedder"), ...d.embedder.embedder})],
  ["spool", "Spool", (d) => d.spool],
  ["stream", "Live stream", (d) => d.stream],
  ["access", "Access", (d) => d.access],
  ["connections", "Connections", (d) => d.connections],
  ["retention", "Retention", (d) => d.retention],
  ["consolidation", "Consolidation (merged, superseded, used)", (d) => d.consolidation],
  ["loop", "Event loop (how late the Trio thread ran)", (d) => d.loop],
  ["gc", "Garbage collector", (d) => d.gc && {
    frozenObjects: d.gc.frozenObjects,
    ...Object.fromEntries(d.gc.generations.map((g, i) => [
      i === d.gc.generations.length - 1 ? "fullCollections" : `generation${i}`,
      `${number(g.collections)} × · ${number(g.totalMs)} ms in all · longest ${number(g.maxMs)} ms`])),
  }],
];

function show(name, value) {
  if (value === null || value === undefined || value === "") return "–";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") {
    if (/Bytes$/.test(name)) return bytes(value);
    if (/At$/.test(name)) return ago(value);
    if (/Ms$/.test(name)) return `${number(value)} ms`;
    if (/Seconds$|PerSecond$/.test(name)) return number(Math.round(value * 100) / 100);
  }
  if (Array.isArray(value)) return value.length ? value.join(", ") : "–";
  if (typeof value === "object") return JSON.stringify(value);
  return typeof value === "number" ? number(value) : String(value);
}

export class Figures {
  constructor(container) {
    this.cards = new Map();
    for (const [id, title] of SECTIONS) {
      const body = h("dl", {class: "facts"});
      container.append(h("section", {class: "card", dataset: {section: id}}, h("h3", {}, title), body));
      this.cards.set(id, body);
    }
  }

  update(snapshot) {
    for (const [id, , pick, empty] of SECTIONS) {
      const record = pick(snapshot);
      const body = this.cards.get(id);
      if (!record) {
        replace(body, h("dd", {class: "note"}, empty ?? "–"));
        continue;
      }
      replace(body, Object.entries(record).map(([name, value]) => [
        h("dt", {}, words(name)),
        h("dd", {dataset: {field: name, value: typeof value === "object" ? "" : String(value)}}, show(name, value)),
      ]));
    }
  }
}
