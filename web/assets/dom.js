// Building the DOM without markup: every piece of text becomes a Text node
// (textContent), never HTML. Stored content -- prompts, tool output, file paths,
// titles -- is data from the agent's session and may hold `<script>`, `onerror=`
// or `javascript:` links; here it can only ever be text. And text that reads as it
// is stored: characters that reorder or hide text are dropped (visibleText).

const SVG_NS = "http://www.w3.org/2000/svg";
// Attributes that would run or load something: never set through h().
const FORBIDDEN = /^(on|innerhtml$|outerhtml$|srcdoc$|src$|style$|formaction$|action$)/i;

// C0 and C1 controls (tab, newline and return aside), bidirectional embeddings, overrides,
// isolates and marks, zero-width and other invisible format characters, variation selectors
// and Unicode's tag characters: the set the worker drops from text it hands an agent
// (sessionmem/protocol/safe_text.py, INVISIBLE; a test holds the two equal). An override
// would show the file "invoice\u202etxt.exe" as "invoiceexe.txt" and reverse every paragraph
// after it.
const INVISIBLE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufe00-\ufe0f\ufeff\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}]/gu;

/** ``text`` without the characters that reorder or hide text (see INVISIBLE). */
export function visibleText(text) {
  return String(text).replace(INVISIBLE, "");
}

/** A link target of this worker only: "#..." or "/path"; anything else becomes "#". */
export function safeHref(value) {
  const text = String(value);
  return (text.startsWith("#") || (text.startsWith("/") && !text.startsWith("//"))) ? text : "#";
}

function setProps(el, props) {
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") {
      for (const [name, fn] of Object.entries(value)) el.addEventListener(name, fn);
      continue;
    }
    if (FORBIDDEN.test(key)) throw new Error(`h(): attribute ${key} is not allowed`);
    if (key === "class") el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "href") el.setAttribute("href", safeHref(value));
    else if (key === "value" || key === "checked" || key === "selected") el[key] = value;  // exact: a filter's value
    else if (key === "title") el.setAttribute(key, visibleText(value));  // a tooltip shows stored text too
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

/** Append children: nodes as they are, anything else as visible text. */
export function append(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : visibleText(child));
  }
  return el;
}

/** An HTML element: h("li", {class: "item", on: {click}}, "text", child). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  return append(el, children);
}

/** An SVG element (charts). */
export function s(tag, props = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setProps(el, props);
  return append(el, children);
}

/** Replace everything inside ``el``. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`the page has no #${id}`);
  return el;
}
