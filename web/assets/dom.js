// Building the DOM without markup: every piece of text becomes a Text node
// (textContent), never HTML. Stored content -- prompts, tool output, file paths,
// titles -- is data from the agent's session and may hold `<script>`, `onerror=`
// or `javascript:` links; here it can only ever be text.

const SVG_NS = "http://www.w3.org/2000/svg";
// Attributes that would run or load something: never set through h().
const FORBIDDEN = /^(on|innerhtml$|outerhtml$|srcdoc$|src$|style$|formaction$|action$)/i;

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
    else if (key === "value" || key === "checked" || key === "selected") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

/** Append children: nodes as they are, anything else as text. */
export function append(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
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
