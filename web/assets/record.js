// The detail pane of the memory viewer: an observation's full record (with the raw tool
// input and output it was made from), a summary, a search card, and a timeline.
// Text only: see dom.js.

import {AGENT_TITLES, agentBadge, badge, consolidationBadges, fileChips, flaggedBadge, originBadge, time, timelineItem}
  from "./cards.js";
import {h} from "./dom.js";
import {number, when} from "./format.js";

function facts(pairs) {
  return h("dl", {class: "facts"}, pairs.filter(([, value]) => value !== null && value !== undefined && value !== "")
    .map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

// Where a memory's text came from (docs/search.md, "Provenance"), in words.
const PROVENANCE = {prompt: "the user's prompt", tool: "a tool's output (built by rules)",
  model: "a model, from a tool's output", team: "another machine (team database)", import: "an imported file"};

function provenance(value) {
  return value ? PROVENANCE[value] ?? value : "";
}

function agentTitle(row) {
  const agent = row.agent || "claude-code";
  return AGENT_TITLES[agent] ?? agent;
}

function section(title, ...content) {
  const body = content.flat().filter(Boolean);
  return body.length ? h("section", {class: "part"}, h("h3", {}, title), body) : null;
}

function list(values) {
  return values?.length ? h("ul", {}, values.map((value) => h("li", {}, value))) : null;
}

function raw(title, value, open) {
  if (value === null || value === undefined) return null;
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return h("details", {class: "raw", open}, h("summary", {}, title), h("pre", {}, text));
}

function timelineButton(onTimeline) {
  return h("button", {type: "button", class: "timeline-button", on: {click: onTimeline}}, "Session timeline");
}

export function observationView(row, {onTimeline}) {
  return h("article", {class: "record", dataset: {key: `observation:${row.id}`}},
    h("div", {class: "line"}, badge(row.type), badge(row.toolName, "tool"), row.failed ? badge("failed") : null,
      row.compressed ? null : badge("raw", "raw"), agentBadge(row), flaggedBadge(row), originBadge(row.origin),
      ...consolidationBadges(row)),
    h("h2", {class: "record-title"}, row.title || "(untitled)"),
    row.subtitle ? h("p", {class: "subtitle"}, row.subtitle) : null,
    timelineButton(onTimeline),
    row.narrative ? h("p", {class: "narrative"}, row.narrative) : null,
    section("Facts", list(row.facts)),
    section("Files modified", fileChips(row.filesModified ?? [])),
    section("Files read", fileChips(row.filesRead ?? [])),
    section("Concepts", row.concepts?.length ? h("div", {class: "files"}, row.concepts.map((c) => h("span", {class: "chip"}, c))) : null),
    facts([
      ["project", row.project], ["session", row.claudeSessionId], ["prompt", row.promptNumber],
      ["created", when(row.createdAt)], ["origin", row.origin || "this machine"], ["coding agent", agentTitle(row)],
      ["tool use", row.toolUseId], ["subagent", row.agentType || row.agentId],
      ["compressor", [row.compressor, row.model].filter(Boolean).join(" · ")], ["provenance", provenance(row.provenance)],
      ["tokens", row.inputTokens || row.outputTokens ? `${number(row.inputTokens)} in, ${number(row.outputTokens)} out` : ""],
      ["observation", row.id], ["journal event", row.eventId],
    ]),
    raw("Tool input", row.toolInput, true),
    raw("Tool response", row.toolResponse, false));
}

const SUMMARY_PARTS = [["request", "Request"], ["investigated", "Investigated"], ["learned", "Learned"],
  ["completed", "Completed"], ["nextSteps", "Next steps"], ["notes", "Notes"]];

export function summaryView(row, {onTimeline}) {
  return h("article", {class: "record", dataset: {key: `summary:${row.id}`}},
    h("div", {class: "line"}, badge("summary"), agentBadge(row), flaggedBadge(row), originBadge(row.origin)),
    h("h2", {class: "record-title"}, row.request || "Session summary"),
    timelineButton(onTimeline),
    SUMMARY_PARTS.slice(1).map(([field, title]) => section(title, row[field] ? h("p", {}, row[field]) : null)),
    facts([["project", row.project], ["session", row.claudeSessionId], ["prompt", row.promptNumber],
      ["created", when(row.createdAt)], ["coding agent", agentTitle(row)], ["compressor", [row.compressor, row.model].filter(Boolean).join(" · ")],
      ["provenance", provenance(row.provenance)]]));
}

/** What a search result or timeline entry shows of a summary or prompt. */
export function cardView(card, {onTimeline}) {
  const label = card.kind === "observation" ? card.type : card.kind;
  return h("article", {class: "record", dataset: {key: `${card.kind}:${card.id}`}},
    h("div", {class: "line"}, badge(label), agentBadge(card), flaggedBadge(card), originBadge(card.origin)),
    h("h2", {class: "record-title"}, card.title || "(untitled)"),
    timelineButton(onTimeline),
    card.snippet ? h("p", {class: "narrative"}, card.snippet) : null,
    facts([["project", card.project], ["session", card.claudeSessionId], ["prompt", card.promptNumber],
      ["created", when(card.createdAt)], ["provenance", provenance(card.provenance)]]));
}

/**
 * The memory around an anchor (oldest first). With ``sessionOnly`` only the anchor's own
 * session is listed; the worker's timeline spans the project.
 */
export function timelineView(timeline, {sessionOnly, onToggle, onOpen}) {
  const anchor = timeline.entries.find((entry) => entry.anchor);
  const session = anchor ? anchor.claudeSessionId : "";
  const entries = sessionOnly ? timeline.entries.filter((entry) => entry.claudeSessionId === session) : timeline.entries;
  return h("article", {class: "timeline", dataset: {anchor: `${timeline.anchorKind}:${timeline.anchorId}`}},
    h("h2", {}, "Timeline"),
    h("p", {class: "note"}, `${timeline.project} · session ${session}`),
    h("label", {class: "field"},
      h("input", {type: "checkbox", id: "session-only", checked: sessionOnly, on: {change: (e) => onToggle(e.target.checked)}}),
      " this session only"),
    h("ol", {class: "items"}, entries.map((entry) => timelineItem(entry, {onOpen}))),
    anchor ? h("p", {class: "note"}, "Anchor: ", time(anchor.createdAt)) : null);
}
