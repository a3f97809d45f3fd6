// How figures, times and names read on the pages.

const UNITS = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];

/** "3 min ago", "2 h ago"; seconds since the epoch. */
export function ago(seconds, now = Date.now() / 1000) {
  const delta = Math.max(0, now - seconds);
  if (delta < 5) return "just now";
  const [unit, size] = UNITS.find(([, size]) => delta >= size) ?? UNITS[UNITS.length - 1];
  return `${Math.floor(delta / size)} ${unit} ago`;
}

/** A duration in seconds, short: "42 s", "3 min", "5 h". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  const [unit, size] = UNITS.find(([, size]) => seconds >= size) ?? ["s", 1];
  return `${Math.floor(seconds / size)} ${unit}`;
}

/** Local date and time, for a title attribute or a detail. */
export function when(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toLocaleString();
}

export function number(value) {
  if (typeof value !== "number") return value === null || value === undefined ? "–" : String(value);
  return Number.isInteger(value) ? value.toLocaleString() : value.toLocaleString(undefined, {maximumFractionDigits: 2});
}

export function bytes(value) {
  if (!value) return "0 B";
  const units = ["B", "KB", "MB", "GB"];
  const power = Math.min(units.length - 1, Math.floor(Math.log(value) / Math.log(1024)));
  return `${(value / 1024 ** power).toFixed(power ? 1 : 0)} ${units[power]}`;
}

/** "mailboxDepth" -> "mailbox depth". */
export function words(name) {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
}

/** The last ``parts`` components of a path: what fits in a chip. */
export function shortPath(path, parts = 2) {
  const pieces = String(path).split("/").filter(Boolean);
  return pieces.length > parts ? "…/" + pieces.slice(-parts).join("/") : String(path);
}

/** "init 1 · observation 12". */
export function counts(byKind) {
  const entries = Object.entries(byKind ?? {});
  return entries.length ? entries.map(([kind, n]) => `${kind} ${n}`).join(" · ") : "–";
}
