// The memory viewer at "/": choose a project, watch its memory arrive live, search it,
// open a record and its session's timeline.
//
// The URL's fragment is the page's state (#project=…&q=…&open=observation:12&view=
// timeline): every control changes the fragment, and render() draws what it says, so a
// reload or the back button shows the same thing. Live events (/stream) only say that
// something new was stored: the page then asks for the newest rows again.

import {getJSON, path} from "./api.js";
import {feedItem, resultItem} from "./cards.js";
import {byId, h, replace} from "./dom.js";
import {listen} from "./live.js";
import {cardView, observationView, summaryView, timelineView} from "./record.js";

const FEED_OBSERVATIONS = 80;
const FEED_SUMMARIES = 20;
const SEARCH_LIMIT = 50;
const TIMELINE_SIDE = 30;
const REFRESH_DELAY_MS = 200; // a burst of live events is one refresh
const FILTERS = ["q", "type", "since", "until", "file", "origin", "agent", "flagged"];

const page = {
  projects: [],
  listKey: null,
  detailKey: null,
  entries: new Map(), // "kind:id" -> what the list shows (for the detail of summaries and cards)
  seen: null, // keys shown so far in the feed (null: nothing yet, nothing is "new")
  feedSignature: "", // what the feed shows now
  refreshTimer: 0,
  sequence: 0, // answers to older requests are dropped
  sessionOnly: true,
  missed: 0, // live memory not shown while a search is
};

// -- the state in the URL's fragment ------------------------------------------------------

function state() {
  const params = new URLSearchParams(location.hash.slice(1));
  const value = (name) => params.get(name) ?? "";
  return {
    project: params.has("project") ? value("project") : null, // "" is every project; null: not chosen yet
    q: value("q"), type: value("type"), since: value("since"), until: value("until"), file: value("file"),
    origin: value("origin"), agent: value("agent"), flagged: value("flagged"), open: value("open"), view: value("view") || "record",
  };
}

function navigate(changes) {
  const params = new URLSearchParams(location.hash.slice(1));
  for (const [name, value] of Object.entries(changes)) {
    if (value === null || value === undefined || (value === "" && name !== "project")) params.delete(name);
    else params.set(name, value);
  }
  const next = params.toString();
  if (next === location.hash.slice(1)) render();
  else location.hash = next;
}

// -- errors ---------------------------------------------------------------------------------

function showError(error) {
  const box = byId("error");
  box.hidden = !error;
  replace(box, error ? String(error.message ?? error) : "");
}

async function guarded(work) {
  try {
    await work();
    showError(null);
  } catch (error) {
    showError(error);
  }
}

// -- projects ---------------------------------------------------------------------------

// The selector lists the most recently active projects a page at a time; its last option,
// "More projects…", loads the next page (with 1,500 projects, one list would hide the user's own).
async function loadProjects() {
  const first = await getJSON("/api/projects");
  page.projects = first.projects.map((row) => row.project);
  const select = byId("project");
  replace(select, h("option", {value: ""}, "All projects"),
    page.projects.map((name) => h("option", {value: name}, name)),
    first.more ? h("option", {value: "", dataset: {more: "1"}}, "More projects…") : null);
  const chosen = state().project;
  showProject(chosen ?? page.projects[0] ?? "");
}

async function loadMoreProjects() {
  const select = byId("project");
  const next = await getJSON("/api/projects", {offset: page.projects.length});
  const fresh = next.projects.map((row) => row.project).filter((name) => !page.projects.includes(name));
  page.projects.push(...fresh);
  const moreOption = select.querySelector("option[data-more]");
  for (const name of fresh) {
    select.querySelector(`option[data-extra][value="${CSS.escape(name)}"]`)?.remove();
    select.insertBefore(h("option", {value: name}, name), moreOption);
  }
  if (!next.more) moreOption?.remove();
  showProject(state().project ?? "");
}

/** Select ``name``, adding it if no page loaded so far holds it (a link or the fragment named it). */
function showProject(name) {
  const select = byId("project");
  if (name !== "" && ![...select.options].some((option) => option.value === name && !option.dataset.more)) {
    select.insertBefore(h("option", {value: name, dataset: {extra: "1"}}, name), select.querySelector("option[data-more]"));
  }
  select.value = name;
}

// -- the list: the feed, or search results ---------------------------------------------------

function untilExclusive(day) {
  // The form's "to" day is inclusive; the API's `until` is "created before".
  const date = new Date(`${day}T00:00`);
  date.setDate(date.getDate() + 1);
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

function matchesFilters(entry, filters) {
  const row = entry.row;
  if (filters.type && (entry.kind !== "observation" || row.type !== filters.type)) return false;
  if (filters.file) {
    const files = entry.kind === "observation" ? [...row.filesRead, ...row.filesModified] : [];
    if (!files.some((file) => file.includes(filters.file))) return false;
  }
  if (filters.since && row.createdAt < new Date(`${filters.since}T00:00`).getTime() / 1000) return false;
  if (filters.until && row.createdAt >= new Date(`${untilExclusive(filters.until)}T00:00`).getTime() / 1000) return false;
  return true;
}

async function loadFeed(current, sequence) {
  // The origin, the agent and the flag are filtered by the worker: the newest rows of one origin (one agent's,
  // or flagged), not the newest rows cut down.
  const params = {project: current.project || undefined, origin: current.origin || undefined,
    agent: current.agent || undefined, flagged: current.flagged || undefined};
  const [observations, summaries] = await Promise.all([
    getJSON("/api/observations", {...params, limit: FEED_OBSERVATIONS}),
    getJSON("/api/summaries", {...params, limit: FEED_SUMMARIES}),
  ]);
  if (sequence !== page.sequence) return;
  const entries = [
    ...observations.observations.map((row) => ({kind: "observation", row})),
    ...summaries.summaries.map((row) => ({kind: "summary", row})),
  ].sort((a, b) => b.row.createdAt - a.row.createdAt || b.row.id - a.row.id)
    .filter((entry) => matchesFilters(entry, current));
  const signature = JSON.stringify([current.open, entries.map((e) => [e.kind, e.row.id])]);
  if (signature === page.feedSignature) return; // nothing new: keep the elements (a click in progress stays)
  page.feedSignature = signature;
  const filtered = current.type || current.file || current.since || current.until || current.origin || current.agent
    || current.flagged;
  replace(byId("list-title"), filtered ? "Recent memory (filtered)" : "Recent memory");
  replace(byId("list-note"), entries.length ? `${entries.length} newest` : "");
  const seen = page.seen;
  page.seen = new Set(entries.map((entry) => `${entry.kind}:${entry.row.id}`));
  page.entries = new Map(entries.map((entry) => [`${entry.kind}:${entry.row.id}`, entry]));
  const selected = current.open;
  const items = entries.map((entry) => {
    const key = `${entry.kind}:${entry.row.id}`;
    return feedItem(entry, {fresh: seen !== null && !seen.has(key), selected: key === selected, onOpen: openRecord});
  });
  replace(byId("list"), items.length ? items : h("li", {class: "note empty"},
    "No memory yet for this project: it appears here as Claude works."));
}

async function loadSearch(current, sequence) {
  const answer = await getJSON("/api/search", {
    q: current.q, project: current.project || undefined, type: current.type, file: current.file,
    origin: current.origin, agent: current.agent, flagged: current.flagged,
    since: current.since, until: current.until ? untilExclusive(current.until) : "", limit: SEARCH_LIMIT,
  });
  if (sequence !== page.sequence) return;
  const results = answer.results;
  page.entries = new Map(results.map((result) => [`${result.kind}:${result.id}`, {kind: "card", row: result}]));
  replace(byId("list-title"), "Search results");
  const vectors = answer.vectors !== "used" ? `words only (vectors ${answer.vectors})`
    : answer.unembedded ? `words and meaning (${answer.unembedded} documents not yet by meaning)` : "words and meaning";
  replace(byId("list-note"), `${results.length}${answer.more ? "+" : ""} for “${answer.query}” · ${vectors}`);
  replace(byId("list"), results.length
    ? results.map((result) => resultItem(result, {selected: `${result.kind}:${result.id}` === current.open,
      onOpen: openRecord}))
    : h("li", {class: "note empty"}, "Nothing found."));
}

function loadList(current) {
  const sequence = ++page.sequence;
  page.missed = 0;
  if (!current.q) return loadFeed(current, sequence);
  page.seen = null;
  return loadSearch(current, sequence);
}

function refreshSoon() {
  clearTimeout(page.refreshTimer);
  page.refreshTimer = setTimeout(() => guarded(() => loadList(state())), REFRESH_DELAY_MS);
}

// -- the detail pane -------------------------------------------------------------------------

function openRecord(key) {
  navigate({open: key, view: "record"});
}

function showTimeline() {
  navigate({view: "timeline"});
}

async function loadDetail(current) {
  const pane = byId("detail");
  if (!current.open) {
    replace(pane, h("p", {class: "note"}, "Choose a memory to see all of it, and its session's timeline."));
    return;
  }
  const [kind, id] = current.open.split(":");
  if (current.view === "timeline") {
    const timeline = await getJSON("/api/timeline", {anchor: current.open, before: TIMELINE_SIDE, after: TIMELINE_SIDE});
    const draw = () => replace(pane, timelineView(timeline, {
      sessionOnly: page.sessionOnly, onOpen: openRecord,
      onToggle: (checked) => { page.sessionOnly = checked; draw(); },
    }));
    draw();
    return;
  }
  if (kind === "observation") {
    replace(pane, observationView(await getJSON(path("/api/observations/{id}", {id})), {onTimeline: showTimeline}));
    return;
  }
  const known = page.entries.get(current.open);
  if (known?.kind === "summary") replace(pane, summaryView(known.row, {onTimeline: showTimeline}));
  else if (known?.kind === "card") replace(pane, cardView(known.row, {onTimeline: showTimeline}));
  else navigate({view: "timeline"}); // nothing at hand to show of it: its place in time
}

// -- drawing what the fragment says ----------------------------------------------------------

function syncForm(current) {
  for (const name of FILTERS) {
    const input = byId(name);
    if (input.value !== current[name]) input.value = current[name];
  }
  if (current.project !== null && byId("project").value !== current.project) showProject(current.project);
}

async function render() {
  const current = state();
  if (current.project === null) {
    // First visit: the most recently active project.
    navigate({project: byId("project").value});
    return;
  }
  syncForm(current);
  const listKey = JSON.stringify([current.project, ...FILTERS.map((name) => current[name])]);
  const detailKey = `${current.open}|${current.view}`;
  const work = [];
  if (listKey !== page.listKey) {
    page.listKey = listKey;
    page.seen = null;
    page.feedSignature = "";
    work.push(loadList(current));
  } else {
    for (const li of byId("list").querySelectorAll(".item")) {
      li.classList.toggle("selected", li.dataset.key === current.open);
    }
  }
  if (detailKey !== page.detailKey) {
    page.detailKey = detailKey;
    work.push(loadDetail(current));
  }
  await guarded(() => Promise.all(work));
}

// -- live ------------------------------------------------------------------------------------

function onStored(event) {
  if (!page.projects.includes(event.project)) guarded(loadProjects);
  const current = state();
  if (current.project && event.project !== current.project) return;
  if (!current.q) {
    refreshSoon();
    return;
  }
  page.missed += 1;
  replace(byId("list-note"), `${page.missed} new since this search · Clear to see them`);
}

function onSession(event) {
  if (!page.projects.includes(event.project)) guarded(loadProjects);
}

// -- team sharing: what this machine shares with the team database, and why ------------------

const SHARING_REASONS = {
  share_projects: () => "shared: share_projects names it",
  approved: (when) => `shared: approved on this machine${when}`,
  denied: (when) => `not shared: refused on this machine${when}`,
  requested: (when) => `not shared: its repository asks to share${when}, not approved (\`sessionmem share allow\` in it)`,
};

async function loadSharing() {
  if (!(await getJSON("/api/health")).team) return; // team memory is off: nothing to list (and no 409 asked for)
  const team = await getJSON("/api/team");
  const entries = team.sharing ?? [];
  const shared = entries.filter((entry) => entry.shared).length;
  replace(byId("sharing-summary"), `${shared} shared with ${team.database || "the team database"}`
    + (entries.length > shared ? `, ${entries.length - shared} not shared` : ""));
  replace(byId("sharing-list"),
    entries.map((entry) => {
      const name = entry.project === "*" ? "every project" : entry.project;
      const key = entry.projectKey && entry.projectKey !== `name:${entry.project}` ? ` (${entry.projectKey})` : "";
      const when = entry.at ? ` on ${new Date(entry.at * 1000).toLocaleString()}` : "";
      return h("li", {dataset: {reason: entry.reason}}, `${name}${key}: ${SHARING_REASONS[entry.reason]?.(when) ?? entry.reason}`);
    }),
    entries.length ? null : h("li", {}, "nothing: name projects in share_projects, or `sessionmem share allow` in a repository"),
    team.consentError ? h("li", {class: "error"}, team.consentError) : null);
  byId("sharing").hidden = false;
}

// -- start -----------------------------------------------------------------------------------

function wire() {
  byId("project").addEventListener("change", (event) => {
    if (event.target.selectedOptions[0]?.dataset.more) guarded(loadMoreProjects);
    else navigate({project: event.target.value, open: null, view: null});
  });
  byId("search").addEventListener("submit", (event) => {
    event.preventDefault();
    const changes = Object.fromEntries(FILTERS.map((name) => [name, byId(name).value.trim()]));
    navigate(changes);
  });
  byId("clear").addEventListener("click", () => navigate(Object.fromEntries(FILTERS.map((name) => [name, null]))));
  window.addEventListener("hashchange", render);
}

async function start() {
  wire();
  await guarded(loadProjects);
  loadSharing().catch(showError); // beside the rest: its success must not hide another's error
  await render();
  listen("/stream", {observation: onStored, summary: onStored, prompt: onSession, session: onSession}, {
    badge: byId("live"),
    onOpen: () => { if (!state().q) refreshSoon(); }, // catch up on what arrived while disconnected
  });
}

start();
