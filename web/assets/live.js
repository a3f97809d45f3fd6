// Server-Sent Events with a visible connection state. EventSource reconnects by
// itself after a drop (a worker restart, say); the badge says so meanwhile.

import {replace} from "./dom.js";

/**
 * Listen to ``path``: ``handlers`` maps event names to functions of the decoded JSON.
 * ``badge`` shows "live" / "reconnecting"; ``onOpen`` runs at each (re)connection,
 * when the page should catch up on what it missed.
 */
export function listen(path, handlers, {badge, onOpen} = {}) {
  const source = new EventSource(path); // same origin: the browser sends the worker's cookie
  const show = (state, text) => {
    if (!badge) return;
    badge.dataset.state = state;
    replace(badge, text);
  };
  show("connecting", "connecting…");
  source.addEventListener("open", () => {
    show("live", "live");
    if (onOpen) onOpen();
  });
  source.addEventListener("error", () => show("down", "reconnecting…"));
  for (const [name, handle] of Object.entries(handlers)) {
    source.addEventListener(name, (message) => {
      let data;
      try {
        data = JSON.parse(message.data);
      } catch {
        return; // not ours to show
      }
      handle(data);
    });
  }
  return source;
}
