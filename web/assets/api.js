// The worker's JSON API, same origin. The browser sends the page login's HttpOnly cookie
// (set by the login link of `sessionmem open`); bodies are JSON, as the guard requires.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function url(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params ?? {})) {
    if (value !== undefined && value !== null && value !== "") query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

async function call(method, path, params, body) {
  const init = {method, credentials: "same-origin", headers: {Accept: "application/json"}};
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url(path, params), init);
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const hint = response.status === 401 ? " (run `sessionmem open` for a new login link)" : "";
    throw new ApiError(response.status, (data && data.error ? data.error : `HTTP ${response.status}`) + hint);
  }
  return data;
}

export const getJSON = (path, params) => call("GET", path, params);
export const postJSON = (path, body = {}, params) => call("POST", path, params, body);

/** A path with its {name} parameters filled in, each percent-encoded. */
export function path(template, values) {
  return template.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(values[name]));
}

// Every page's "Log out" button ends this browser's page login (the cookie is no use after).
for (const button of document.querySelectorAll("[data-logout]")) {
  button.addEventListener("click", async () => {
    await postJSON("/logout").catch(() => null);
    document.body.replaceChildren(document.createTextNode(
      "Logged out. Run `sessionmem open` for a new login link."));
  });
}
