// The list entries of the memory viewer: feed rows (observations and summaries, newest
// first), search results and timeline entries. Text only: see dom.js.

import {h} from "./dom.js";
import {ago, shortPath, when} from "./format.js";

const MAX_FILE_CHIPS = 4;

export function badge(text, kind = text) {
  return h("span", {class: "badge", dataset: {kind}}, text);
}

// The coding agents' titles by the name each memory records (sessionmem/protocol/agents.py AGENT_TITLES; a test
// holds them equal, and the viewer's agent filter to the same names).
export const AGENT_TITLES = {"claude-code": "Claude Code", "codex": "Codex CLI", "gemini-cli": "Gemini CLI",
  "opencode": "OpenCode"};

/** The agent whose session made a memory, by its title ("Codex CLI"); a worker before agents: Claude Code. */
export function agentBadge(row) {
  const agent = row.agent || "claude-code";
  return h("span", {class: "badge", dataset: {kind: "agent", agent}, title: `made in a ${AGENT_TITLES[agent] ?? agent} session`},
    AGENT_TITLES[agent] ?? agent);
}

/** The mark of a memory another machine wrote ("from bob@laptop"); nothing for this machine's own. */
export function originBadge(origin) {
  return origin ? h("span", {class: "badge", dataset: {kind: "origin"}, title: `written on ${origin}`}, `from ${origin}`) : null;
}

/**
 * The mark of a flagged memory: it holds instruction-like text (from a tool's output or another
 * machine), kept as quoted text and never promoted into a title, "Learned" or "Next steps".
 */
export function flaggedBadge(row) {
  return row.flagged ? h("span", {class: "badge", dataset: {kind: "flagged"},
    title: "holds instruction-like text, kept quoted: never promoted into a title or next steps"}, "flagged") : null;
}

/**
 * What the consolidation pass says of an observation (docs/search.md, "Consolidation"): merged into a newer
 * near-duplicate or superseded by a later decision (neither handed over again), what it took in, how often it
 * was used after being handed over.
 */
export function consolidationBadges(row) {
  const marks = row.consolidation;
  if (!marks) return [];
  const badges = [];
  if (marks.duplicateOf) badges.push(h("span", {class: "badge", dataset: {kind: "merged"},
    title: "a near-duplicate of a newer memory: handed over as that one"}, `merged into #${marks.duplicateOf}`));
  if (marks.supersededBy) badges.push(h("span", {class: "badge", dataset: {kind: "superseded"},
    title: "a later decision about the same thing replaced it: not handed over"}, `superseded by #${marks.supersededBy}`));
  if (marks.merged) badges.push(h("span", {class: "badge", dataset: {kind: "merges"},
    title: "older near-duplicates merged into it"}, `merged ×${marks.merged + 1}`));
  if (marks.supersedes) badges.push(h("span", {class: "badge", dataset: {kind: "supersedes"},
    title: "earlier decisions about the same thing it replaced"}, `supersedes ${marks.supersedes}`));
  if (marks.used) badges.push(h("span", {class: "badge", dataset: {kind: "used"},
    title: `handed over ${marks.told ?? 0}×; then acted upon (its files read or changed) or fetched ${marks.used}×`},
    `used ${marks.used}×`));
  return badges;
}

export function fileChips(files) {
  const shown = files.slice(0, MAX_FILE_CHIPS).map((file) => h("span", {class: "chip", title: file}, shortPath(file)));
  const more = files.length > MAX_FILE_CHIPS ? h("span", {class: "chip more"}, `+${files.length - MAX_FILE_CHIPS}`) : null;
  return files.length ? h("div", {class: "files"}, shown, more) : null;
}

export function time(seconds) {
  return h("time", {datetime: new Date(seconds * 1000).toISOString(), title: when(seconds)}, ago(seconds));
}

/** One clickable entry of a list: ``key`` is "kind:id", what the detail pane opens. */
function item(key, {fresh, selected, onOpen}, ...children) {
  const open = () => onOpen(key);
  return h("li", {
    class: ["item", fresh && "fresh", selected && "selected"], tabindex: 0, dataset: {key},
    on: {click: open, keydown: (event) => { if (event.key === "Enter") open(); }},
  }, children);
}

export function observationFiles(row) {
  return [...new Set([...(row.filesModified ?? []), ...(row.filesRead ?? [])])];
}

/** A feed entry: ``entry`` is {kind: "observation" | "summary", row}. */
export function feedItem(entry, options) {
  const {kind, row} = entry;
  if (kind === "summary") {
    return item(`summary:${row.id}`, options,
      h("div", {class: "line"}, badge("summary"), h("span", {class: "title"}, row.request || "Session summary"),
        agentBadge(row), flaggedBadge(row), originBadge(row.origin)),
      row.completed ? h("p", {class: "snippet"}, row.completed) : null,
      h("div", {class: "meta"}, time(row.createdAt), ` · prompt ${row.promptNumber}`));
  }
  return item(`observation:${row.id}`, options,
    h("div", {class: "line"}, badge(row.type), h("span", {class: "title"}, row.title || "(untitled)"),
      row.failed ? badge("failed") : null, agentBadge(row), flaggedBadge(row), originBadge(row.origin),
      ...consolidationBadges(row)),
    h("div", {class: "meta"}, row.toolName, " · ", time(row.createdAt)),
    fileChips(observationFiles(row)));
}

/** A search result (a DocumentCard with its score and what matched it). */
export function resultItem(result, options) {
  const label = result.kind === "observation" ? result.type : result.kind;
  return item(`${result.kind}:${result.id}`, options,
    h("div", {class: "line"}, badge(label), h("span", {class: "title"}, result.title || "(untitled)"),
      agentBadge(result), flaggedBadge(result), originBadge(result.origin)),
    result.snippet ? h("p", {class: "snippet"}, result.snippet) : null,
    h("div", {class: "meta"}, result.project, " · ", time(result.createdAt),
      result.matchedBy?.length ? ` · matched by ${result.matchedBy.join(" and ")}` : ""),
    fileChips(result.files ?? []));
}

/** A timeline entry; the anchor is marked. */
export function timelineItem(entry, options) {
  const label = entry.kind === "observation" ? entry.type : entry.kind;
  const li = item(`${entry.kind}:${entry.id}`, {...options, selected: entry.anchor},
    h("div", {class: "line"}, badge(label), h("span", {class: "title"}, entry.title || "(untitled)"),
      agentBadge(entry), flaggedBadge(entry), originBadge(entry.origin)),
    entry.snippet ? h("p", {class: "snippet"}, entry.snippet) : null,
    h("div", {class: "meta"}, `prompt ${entry.promptNumber} · `, time(entry.createdAt)),
    fileChips(entry.files ?? []));
  if (entry.anchor) li.classList.add("anchor");
  return li;
}
