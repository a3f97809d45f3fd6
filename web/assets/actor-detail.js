// The /debug page's actor detail: one session actor's figures, its recent messages and
// its recent errors (GET /debug/actors/{id}), refreshed with each snapshot while open.

import {getJSON, path} from "./api.js";
import {h, replace} from "./dom.js";
import {ago, counts, when, words} from "./format.js";

export class ActorDetail {
  constructor(pane, {onClose}) {
    this.pane = pane;
    this.onClose = onClose;
    this.sessionId = null;
    this.loading = false;
  }

  open(sessionId) {
    this.sessionId = sessionId;
    this.pane.hidden = false;
    replace(this.pane, h("p", {class: "note"}, "loading…"));
    return this.refresh();
  }

  close() {
    this.sessionId = null;
    this.pane.hidden = true;
    replace(this.pane);
  }

  async refresh() {
    const sessionId = this.sessionId;
    if (sessionId === null || this.loading) return;
    this.loading = true;
    try {
      const history = await getJSON(path("/debug/actors/{id}", {id: sessionId}));
      if (sessionId === this.sessionId) this.draw(history);
    } catch (error) {
      if (sessionId === this.sessionId) {
        const message = error.status === 404
          ? "This actor has stopped (idle, and nothing left to do): its memory stays in the viewer."
          : String(error.message);
        replace(this.pane, this.heading(sessionId), h("p", {class: "note"}, message));
      }
    } finally {
      this.loading = false;
    }
  }

  heading(sessionId) {
    return h("div", {class: "pane-head"}, h("h2", {}, "Actor ", h("code", {}, sessionId)),
      h("button", {type: "button", class: "quiet", on: {click: () => this.onClose()}}, "Close"));
  }

  draw(history) {
    const stats = history.statistics;
    const figures = Object.entries(stats).filter(([name]) => name !== "processedByKind").map(([name, value]) => [
      h("dt", {}, words(name)),
      h("dd", {dataset: {field: name}}, value === null || value === "" ? "–" : name.endsWith("At") ? when(value) : String(value)),
    ]);
    const messages = history.recentMessages.map((m) => h("tr", {},
      h("td", {}, String(m.eventId)), h("td", {}, m.kind), h("td", {}, m.toolName || "–"),
      h("td", {title: when(m.finishedAt)}, ago(m.finishedAt))));
    const errors = history.recentErrors.map((e) => h("li", {}, h("time", {title: when(e.at)}, ago(e.at)), " ",
      h("span", {class: "error-text"}, e.error)));
    replace(this.pane, this.heading(stats.claudeSessionId),
      h("dl", {class: "facts"}, figures, h("dt", {}, "processed by kind"), h("dd", {}, counts(stats.processedByKind))),
      h("h3", {}, "Recent messages"),
      messages.length
        ? h("table", {class: "messages"}, h("thead", {}, h("tr", {}, ["event", "kind", "tool", "finished"].map((t) => h("th", {scope: "col"}, t)))),
          h("tbody", {}, messages))
        : h("p", {class: "note"}, "None finished yet."),
      h("h3", {}, "Recent errors"),
      errors.length ? h("ul", {class: "errors"}, errors) : h("p", {class: "note"}, "None."));
  }
}
