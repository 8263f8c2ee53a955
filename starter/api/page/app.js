// The operator page: the hub's JSON API, called with the bearer token this tab holds
// (sessionStorage: never a cookie, never a URL). Every text from the hub is set with
// textContent (el() below), never parsed as markup.

const TOKEN = "hubjobs.token";
const WORKSPACE = "hubjobs.workspace";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];
const ITEM_STATES = ["failed", "pending", "succeeded", "skipped"];
const JOBS_PAGE = 25;
const ITEMS_PAGE = 50;

const THEME = "hubjobs.theme";
// Made on first use, and while the first view's requests are out (the start, below): the
// first Intl object loads ICU's data, tens of milliseconds a tab.
let NUMBER = null;
let RELATIVE = null;
const EXACT = new Map();
const UNITS = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400],
  ["hour", 3600], ["minute", 60], ["second", 1]];

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const help = document.getElementById("help");
let config = { temporal_ui_url: null, namespace: "default", login_links: false };
let kinds = null;
// The caller's standing in each workspace it opened (GET …/me): what the page offers.
const standings = new Map();
// What the current view must stop when another one replaces it (its streams).
let leaving = [];

// --- building the page ------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function say(message) {
  notice.textContent = message;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { notice.textContent = ""; }, 6000);
}

function n(value) {
  NUMBER ||= new Intl.NumberFormat();
  return NUMBER.format(value);
}

function ago(at) {
  const seconds = Math.round((at - Date.now()) / 1000);
  const [unit, size] = UNITS.find(([, size]) => Math.abs(seconds) >= size) || UNITS[6];
  RELATIVE ||= new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  return RELATIVE.format(Math.trunc(seconds / size), unit);
}

// The exact time, with its zone: the reader's, or a schedule's own. One format a zone
// (toLocaleString with options makes one a call).
function exact(value, timeZone) {
  if (!EXACT.has(timeZone)) {
    EXACT.set(timeZone, new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "short", day: "numeric", hour: "numeric", minute: "2-digit",
      second: "2-digit", timeZoneName: "short", timeZone,
    }));
  }
  return EXACT.get(timeZone).format(new Date(value));
}

// Relative ("5 minutes ago"), the exact time on hover; kept current by the timer below.
function when(value, timeZone) {
  if (!value) return "—";
  return el("time", { datetime: value, title: exact(value, timeZone), "data-ago": true },
    ago(Date.parse(value)));
}
setInterval(() => {
  for (const time of document.querySelectorAll("time[data-ago]")) {
    time.textContent = ago(Date.parse(time.dateTime));
  }
}, 15000);

function duration(from, to) {
  if (!from) return "—";
  const seconds = Math.max(0, Math.round(((to ? Date.parse(to) : Date.now()) - Date.parse(from)) / 1000));
  const parts = [[Math.floor(seconds / 86400), "d"], [Math.floor(seconds / 3600) % 24, "h"],
    [Math.floor(seconds / 60) % 60, "min"], [seconds % 60, "s"]];
  const first = parts.findIndex(([count]) => count > 0);
  if (first < 0) return "0 s";
  return parts.slice(first, first + 2).filter(([count]) => count > 0)
    .map(([count, unit]) => `${count} ${unit}`).join(" ");
}

// An id whole: it breaks only after its dashes and underscores, and copies in one click.
function idOf(value, name) {
  const code = el("code", { class: "id" },
    String(value).split(/(?<=[-_])/).flatMap((part) => [part, el("wbr")]));
  const copy = el("button", {
    type: "button", class: "quiet copy", text: "Copy", "aria-label": `Copy the ${name}`,
    onclick: () => navigator.clipboard.writeText(String(value))
      .then(() => say(`Copied the ${name}.`), () => say(`Not copied: select the ${name} instead.`)),
  });
  return el("span", { class: "id-line" }, code, " ", copy);
}

function titled(text) {
  document.title = `${text} · hubjobs`;
}

function statusLabel(job) {
  return job.failed > 0 ? `${job.status} (${n(job.failed)} failed)` : job.status;
}

function statusBadge(job) {
  const badge = el("span", { class: `badge status-${job.status}`, "data-status": job.status });
  badge.textContent = statusLabel(job);
  if (job.failed > 0) badge.classList.add("has-failed");
  return badge;
}

function stuckFlag(job) {
  if (!job.stuck_since) return null;
  return el("span", { class: "stuck", title: job.stuck_reason || "" }, " ⚠ stuck");
}

function bar(job, label) {
  const bar = el("progress", { max: Math.max(job.total, 1), "aria-label": label });
  if (job.total > 0) bar.value = job.processed;
  else if (job.status !== "queued" && job.status !== "running") bar.value = 0;
  return bar;
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

// A view's first paint with the API's answer, once a document: a mark a profiler (and the
// paint benchmark) reads from the navigation's start.
function painted(view) {
  const name = `hubjobs:${view}-painted`;
  if (!performance.getEntriesByName(name, "mark").length) performance.mark(name);
}

// --- the token and the API ----------------------------------------------------------

const token = () => sessionStorage.getItem(TOKEN);
const workspace = () => sessionStorage.getItem(WORKSPACE);

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function errorOf(response) {
  const body = await response.json().catch(() => null);
  const detail = body && body.error;
  if (detail && typeof detail.code === "string") {
    return new ApiError(response.status, detail.code, String(detail.message));
  }
  return new ApiError(response.status, "http_error", `the API answered ${response.status}`);
}

// The token is gone (refused, expired, signed out): the sign-in form, the address kept
// (signing in again comes back to it).
function signedOut(message) {
  sessionStorage.removeItem(TOKEN);
  standings.clear();
  route(message);
}

async function call(method, path, { query, body, signal, accept } = {}) {
  const url = new URL(path, location.origin);
  const given = query instanceof URLSearchParams ? [...query] : Object.entries(query || {});
  for (const [name, value] of given) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.append(name, value);
  }
  // Said as the console's, for the audit trail (the API's own default is `api`).
  const headers = {
    Authorization: `Bearer ${token()}`, Accept: accept || "application/json", "X-Hubjobs-Surface": "console",
  };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
    signal,
  });
  if (response.status === 401) {
    const error = await errorOf(response);
    signedOut(`${error.message}: sign in again.`);
    throw error;
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function api(method, path, options) {
  const response = await call(method, path, options);
  return response.status === 204 ? null : response.json();
}

// Server-Sent Events over fetch (an EventSource cannot send the Authorization header).
async function* events(path, { signal, lastEventId }) {
  const headers = { Authorization: `Bearer ${token()}`, Accept: "text/event-stream" };
  if (lastEventId) headers["Last-Event-ID"] = lastEventId;
  const response = await fetch(path, { headers, signal, credentials: "omit", cache: "no-store" });
  if (response.status === 204) return;
  if (response.status === 401) {
    const error = await errorOf(response);
    signedOut(`${error.message}: sign in again.`);
    throw error;
  }
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    // A "\r" at a chunk's end may be half of a "\r\n": kept for the next chunk.
    const held = buffer.endsWith("\r") ? "\r" : "";
    const text = (held ? buffer.slice(0, -1) : buffer).replace(/\r\n?/g, "\n");
    const blocks = text.split("\n\n");
    buffer = blocks.pop() + held;
    for (const block of blocks) {
      const event = { event: "message", data: [], id: null };
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        const field = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (name === "event") event.event = field;
        else if (name === "data") event.data.push(field);
        else if (name === "id") event.id = field;
      }
      if (event.data.length) yield { ...event, data: JSON.parse(event.data.join("\n")) };
    }
  }
}

// Follows a stream until the view changes: opened again after a cut (with the last
// event's id when ``resumable``), waiting longer each time, at most 10 s; a refusal
// (404) ends it, told to ``onRefused``. A hidden tab holds no stream (a browser keeps six
// connections to a host over HTTP/1.1, for all its tabs): closed when the tab is hidden,
// opened again when it is shown.
function follow(path, onEvent, { resumable = false, onRefused = () => {} } = {}) {
  let stopped = false;
  let current = null;
  let shown = null;
  const hidden = () => document.visibilityState === "hidden";
  const onVisibility = () => {
    if (hidden() && current) current.abort();
    if (!hidden() && shown) shown();
  };
  document.addEventListener("visibilitychange", onVisibility);
  leaving.push(() => {
    stopped = true;
    if (current) current.abort();
    if (shown) shown();
    document.removeEventListener("visibilitychange", onVisibility);
  });
  (async () => {
    let lastId = null;
    let pause = 500;
    while (!stopped) {
      if (hidden()) {
        await new Promise((resolve) => { shown = resolve; });
        shown = null;
        continue;
      }
      current = new AbortController();
      try {
        const options = { signal: current.signal, lastEventId: resumable ? lastId : null };
        for await (const event of events(path, options)) {
          pause = 500;
          if (event.id) lastId = event.id;
          if (event.event === "error") say(`Live updates paused: ${event.data.error.message}`);
          else if (onEvent(event) === "done") return;
        }
      } catch (error) {
        if (stopped || error.status === 401) return;
        if (error.status === 404) {
          onRefused(error);
          return;
        }
        if (current.signal.aborted) continue; // hidden: wait to be shown
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, 10000);
    }
  })();
}

async function download(path, name) {
  try {
    const blob = await (await call("GET", path, { accept: "*/*" })).blob();
    const url = URL.createObjectURL(blob);
    const link = el("a", { href: url, download: name, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 30000);
  } catch (error) {
    say(`Download refused: ${error.message}`);
  }
}

// The kinds served (GET /kinds): names, titles and payload schemas; read once.
async function knownKinds() {
  if (kinds === null) {
    kinds = await fetch("/kinds", { credentials: "omit" })
      .then((r) => r.json()).then((b) => b.kinds).catch(() => []);
  }
  return kinds;
}

function standingIn(ws) {
  if (!standings.has(ws)) {
    standings.set(ws, api("GET", `/workspaces/${ws}/me`).catch((error) => {
      standings.delete(ws);
      throw error;
    }));
  }
  return standings.get(ws);
}

// --- routing ---------------------------------------------------------------------------

function go(path) {
  location.hash = `#${path}`;
}

function header(ws) {
  const signOut = document.getElementById("sign-out");
  const who = document.getElementById("who");
  const jobsLink = document.getElementById("nav-jobs");
  const schedulesLink = document.getElementById("nav-schedules");
  const startLink = document.getElementById("nav-start");
  const overviewLink = document.getElementById("nav-overview");
  const workersLink = document.getElementById("nav-workers");
  const activityLink = document.getElementById("nav-activity");
  signOut.hidden = !ws;
  who.textContent = ws ? `Workspace ${ws}` : "";
  jobsLink.href = ws ? `#/w/${ws}/jobs` : "#/";
  schedulesLink.href = ws ? `#/w/${ws}/schedules` : "#/";
  startLink.href = ws ? `#/w/${ws}/start` : "#/";
  overviewLink.href = ws ? `#/w/${ws}/overview` : "#/";
  workersLink.href = ws ? `#/w/${ws}/workers` : "#/";
  activityLink.href = ws ? `#/w/${ws}/activity` : "#/";
  startLink.hidden = true;
  const sections = {
    schedules: schedulesLink, start: startLink, overview: overviewLink, workers: workersLink, activity: activityLink,
  };
  const section = sections[location.hash.split("?")[0].split("/")[3]] || jobsLink;
  for (const link of [jobsLink, ...Object.values(sections)]) link.removeAttribute("aria-current");
  if (ws) section.setAttribute("aria-current", "page");
  if (!ws) return;
  // The role beside the workspace; "Start a job" only for whoever may start one.
  standingIn(ws).then((me) => {
    who.textContent = `Workspace ${ws} · ${me.role}`;
    startLink.hidden = !me.may_act;
  }, () => {});
}

function route(message) {
  for (const stop of leaving.splice(0)) stop();
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query);
  const parts = path.split("/").filter(Boolean);
  if (!token()) {
    header(null);
    return signIn(typeof message === "string" ? message : "");
  }
  if (parts[0] !== "w" || !UUID.test(parts[1] || "")) return go(`/w/${workspace()}/jobs`);
  const ws = parts[1].toLowerCase();
  header(ws);
  main.focus({ preventScroll: true });
  if (parts[2] === "jobs" && parts.length === 3) return jobsView(ws, params);
  if (parts[2] === "jobs" && parts.length === 4 && UUID.test(parts[3])) {
    return jobView(ws, parts[3].toLowerCase(), params);
  }
  if (parts[2] === "schedules" && parts.length === 3) return schedulesView(ws, params);
  if (parts[2] === "start" && parts.length === 3) return startView(ws, params);
  if (parts[2] === "overview" && parts.length === 3) return overviewView(ws, params);
  if (parts[2] === "workers" && parts.length === 3) return workersView(ws);
  if (parts[2] === "activity" && parts.length === 3) return activityView(ws, params);
  return go(`/w/${ws}/jobs`);
}

// Where the address names another workspace than the one this tab signed in for, it
// says so: a shared link to a job of another workspace is not a mystery.
function failure(title, error, ws) {
  titled(title);
  const mine = workspace();
  show(
    el("h1", { text: title }),
    el("p", { class: "error", role: "alert", text: error.message }),
    el("p", { class: "hint" }, "Code: ", el("code", { text: error.code || "" })),
    ws && mine && ws !== mine ? el("p", { id: "other-workspace" },
      `This address is in workspace ${ws}; this tab signed in for workspace ${mine}. `,
      el("a", { href: `#/w/${mine}/jobs`, text: "Your workspace's jobs" })) : "",
  );
}

// --- signing in -------------------------------------------------------------------------

function signIn(message) {
  const tokenInput = el("input", {
    id: "token", type: "password", autocomplete: "off", spellcheck: "false", required: true,
  });
  const wsInput = el("input", {
    id: "workspace", type: "text", autocomplete: "off", spellcheck: "false", required: true,
    pattern: UUID.source.slice(1, -1), value: workspace() || "",
  });
  const error = el("p", { class: "error", role: "alert", text: message || "" });

  async function start(tokenValue, ws) {
    sessionStorage.setItem(TOKEN, tokenValue);
    sessionStorage.setItem(WORKSPACE, ws.toLowerCase());
    try {
      await api("GET", `/workspaces/${ws}/jobs`, { query: { limit: 1 } });
      if (location.hash.toLowerCase().startsWith(`#/w/${ws.toLowerCase()}/`)) route();
      else go(`/w/${ws.toLowerCase()}/jobs`);
    } catch (failed) {
      sessionStorage.removeItem(TOKEN);
      error.textContent = `${failed.message} (${failed.code})`;
    }
  }

  const form = el(
    "form",
    {
      class: "card",
      "aria-labelledby": "sign-in-title",
      onsubmit: (event) => {
        event.preventDefault();
        if (!UUID.test(wsInput.value.trim())) {
          error.textContent = "The workspace is a UUID.";
          return;
        }
        start(tokenInput.value.trim(), wsInput.value.trim());
      },
    },
    el("h1", { id: "sign-in-title", text: "Sign in" }),
    el("p", { class: "hint" },
      "Paste an API token (a JWT naming you; `hubjobs token --actor …` mints one where the " +
      "API's secret is known). It stays in this tab only, and is sent as a header."),
    el("label", { for: "token", text: "API token" }),
    tokenInput,
    el("label", { for: "workspace", text: "Workspace" }),
    wsInput,
    el("p", {}, el("button", { type: "submit", text: "Sign in" })),
    error,
  );
  const nodes = [form];
  titled("Sign in");
  if (config.login_links) {
    nodes.push(el("p", { class: "hint", id: "login-link-hint" },
      "On the embedded stack, open the sign-in link `hubjobs up` (or `make run`) printed: " +
      "it signs this tab in as the demo's actor, once, within ten minutes of being printed."));
  }
  show(...nodes);
}

// A sign-in link (`hubjobs up` prints one): its code is taken out of the address at once
// (no history entry keeps it) and exchanged, once, for a token. Returns what went wrong.
async function signInByLink() {
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query);
  const code = params.get("login");
  if (code === null) return "";
  params.delete("login");
  const rest = params.toString();
  history.replaceState(null, "", `${location.pathname}#${path || "/"}${rest ? `?${rest}` : ""}`);
  const response = await fetch("/operator/login", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ code }),
    credentials: "omit",
    cache: "no-store",
  });
  if (!response.ok) return `${(await errorOf(response)).message}`;
  const given = await response.json();
  sessionStorage.setItem(TOKEN, given.token);
  sessionStorage.setItem(WORKSPACE, given.workspace_id.toLowerCase());
  return "";
}

// --- the jobs of a workspace ------------------------------------------------------------

function matches(job, filters) {
  return (!filters.status || job.status === filters.status) && (!filters.kind || job.kind === filters.kind);
}

// A job's row only moves forward (queued, running, then final; its processed count only
// up), while a stream, a read and an action's answer race each other to the page: what
// comes is kept only when nothing newer about that job came first.
function isFinal(job) { return STATUSES.slice(2).includes(job.status); }
function stage(job) { return isFinal(job) ? 2 : STATUSES.indexOf(job.status); }
function notOlder(job, known) {
  return !known || stage(job) > stage(known) ||
    (stage(job) === stage(known) && job.processed >= known.processed);
}

function newestFirst(a, b) {
  const at = Date.parse(b.created_at) - Date.parse(a.created_at);
  return at !== 0 ? at : (b.id < a.id ? -1 : b.id > a.id ? 1 : 0);
}

// The list with one job's change (as `hubjobs list --watch` merges it); null: read it again.
function merged(listed, job, filters, firstPage) {
  const at = listed.findIndex((row) => row.id === job.id);
  // A search the page cannot judge (a field, an actor, dates, another order): rows it
  // listed move, and a job it did not list stays out until the list is read again.
  if (filters.searched && at < 0) return listed;
  if (!matches(job, filters)) {
    if (at < 0) return listed;
    return listed.length >= JOBS_PAGE ? null : listed.filter((row) => row.id !== job.id);
  }
  if (at >= 0) return listed.map((row) => (row.id === job.id ? job : row));
  if (!firstPage) return listed;
  return [...listed, job].sort(newestFirst).slice(0, JOBS_PAGE);
}

// The list's search, as the address holds it and the API takes it (GET …/jobs).
const SEARCH = ["id", "actor_id", "since", "until", "field", "sort"];

function searchControls(ws, params, kinds, filters) {
  const text = (id, value, extra = {}) =>
    el("input", { id, type: "text", autocomplete: "off", spellcheck: "false", value: value || "", ...extra });
  const local = (iso) => (iso ? new Date(iso).toISOString().slice(0, 16) : "");
  const idInput = text("search-id", params.get("id"), { "data-search": true, placeholder: "3fa85f64" });
  const actor = text("search-actor", params.get("actor_id"), { placeholder: "a UUID" });
  const since = el("input", { id: "search-since", type: "datetime-local", value: local(params.get("since")) });
  const until = el("input", { id: "search-until", type: "datetime-local", value: local(params.get("until")) });
  const sort = el("select", { id: "search-sort" },
    [["created_desc", "newest first"], ["created_asc", "oldest first"], ["finished_desc", "finished, latest first"],
      ["finished_asc", "finished, earliest first"]]
      .map(([value, label]) => el("option", { value, selected: value === (params.get("sort") || "created_desc"), text: label })));
  const kind = kinds.find((k) => k.name === filters.kind);
  const [fieldName = "", fieldValue = ""] = (params.getAll("field")[0] || "").split(/=(.*)/s);
  const field = el("select", { id: "search-field", disabled: !kind },
    el("option", { value: "", text: kind ? "any field" : "choose a kind first" }),
    (kind ? kind.fields || [] : []).map((f) => el("option", { value: f.name, selected: f.name === fieldName, text: f.name })));
  const value = text("search-value", fieldValue);
  const clear = el("a", { href: `#/w/${ws}/jobs`, text: "Clear the search" });
  function query() {
    const q = new URLSearchParams();
    if (filters.kind) q.set("kind", filters.kind);
    if (filters.status) q.set("status", filters.status);
    if (idInput.value.trim()) q.set("id", idInput.value.trim());
    if (actor.value.trim()) q.set("actor_id", actor.value.trim());
    if (since.value) q.set("since", new Date(since.value).toISOString());
    if (until.value) q.set("until", new Date(until.value).toISOString());
    if (field.value) q.set("field", `${field.value}=${value.value.trim()}`);
    // Fields the form does not show (a shared address may hold several) are kept.
    for (const extra of params.getAll("field").slice(1)) q.append("field", extra);
    if (sort.value !== "created_desc") q.set("sort", sort.value);
    return q;
  }
  const nodes = [
    el("div", {}, el("label", { for: "search-id", text: "Job id or its start" }), idInput),
    el("div", {}, el("label", { for: "search-actor", text: "Started by (user id)" }), actor),
    el("div", {}, el("label", { for: "search-since", text: "Created from" }), since),
    el("div", {}, el("label", { for: "search-until", text: "Created before" }), until),
    el("div", {}, el("label", { for: "search-field", text: "Field" }), field),
    el("div", {}, el("label", { for: "search-value", text: "Its value" }), value),
    el("div", {}, el("label", { for: "search-sort", text: "Order" }), sort),
    el("div", {}, el("button", { type: "submit", id: "search", text: "Search" }), " ", clear),
  ];
  return { nodes, query };
}

// --- acting on many jobs ----------------------------------------------------------------

// What "every job this search matches" is, as the bulk actions take it (POST …/jobs/cancel,
// …/jobs/retry: the list's filters by the list's names) and as the list counts it.
const BULK_FILTERS = ["status", "kind", "schedule_id", "actor_id", "id", "since", "until", "field"];
const BULK_MOST = 1000;

function bulkFilter(params) {
  const filter = {};
  for (const name of BULK_FILTERS) {
    const values = params.getAll(name);
    if (!values.length) continue;
    filter[name] = name === "field" || name === "status" ? values : values[0];
  }
  return filter;
}

function bulkCountQuery(params) {
  const query = new URLSearchParams({ limit: BULK_MOST });
  for (const name of BULK_FILTERS) for (const value of params.getAll(name)) query.append(name, value);
  return query;
}

// "Retry failed" beside "Cancel": the ticked jobs, or every job the search matches with
// failed items not yet retried, counted by the list first and confirmed with that count;
// the answer said as how many were retried and why the others were not, by code.
function bulkRetry({ base, params, selected, allMatching, reason, outcome, done }) {
  const button = el("button", { type: "button", id: "retry-selected", disabled: true });
  function label() {
    button.textContent = allMatching.checked ? "Retry failed: every job matching this filter"
      : `Retry failed: ${n(selected.size)} selected`;
    button.disabled = !allMatching.checked && selected.size === 0;
  }
  async function count() {
    if (!allMatching.checked) return { count: selected.size, more: false };
    const query = bulkCountQuery(params);
    query.set("to_retry", "true");
    const page = await api("GET", base, { query });
    return { count: page.jobs.length, more: page.next !== null };
  }
  function report(answer) {
    const retried = answer.results.filter((r) => r.created).length;
    const before = answer.results.filter((r) => r.retry && !r.created).length;
    const codes = new Map();
    for (const r of answer.results) if (r.error) codes.set(r.error.code, (codes.get(r.error.code) || 0) + 1);
    const refused = [...codes].flatMap(([code, many], i) => [i ? ", " : "", el("code", { text: code }), `: ${n(many)}`]);
    outcome.replaceChildren(el("span", { id: "retry-outcome" },
      `${n(retried)} retried`,
      before ? `, ${n(before)} already retried` : "",
      codes.size ? [`, ${n(answer.results.length - retried - before)} not retried (`, refused, ")"] : "",
      answer.more ? "; more remain: retry again" : ""));
  }
  async function now(request) {
    button.disabled = true;
    try {
      report(await api("POST", `${base}/retry`, { body: request }));
      done();
    } catch (error) {
      outcome.replaceChildren(`Not retried: ${error.message} `, el("code", { text: error.code }));
    }
    label();
  }
  button.addEventListener("click", async () => {
    const request = allMatching.checked ? { filter: bulkFilter(params) } : { ids: [...selected] };
    request.reason = reason.value.trim() || null;
    let counted;
    try {
      counted = await count();
    } catch (error) {
      outcome.textContent = `Not counted: ${error.message}`;
      return;
    }
    if (counted.count === 0) {
      outcome.textContent = "Nothing to retry: no job matching has failed items not yet retried.";
      return;
    }
    const many = `${n(counted.count)}${counted.more ? " (the first)" : ""}`;
    const jobs = allMatching.checked ? `failed job${counted.count === 1 ? "" : "s"}` : `selected job${counted.count === 1 ? "" : "s"}' failed items`;
    outcome.replaceChildren(el("span", { class: "confirm", role: "group", "aria-label": "Confirm the retry" },
      `Retry ${many} ${jobs}? `,
      el("button", { type: "button", id: "confirm-retry", text: `Yes, retry ${many}`,
        onclick: () => { outcome.replaceChildren(); now(request); } }),
      " ",
      el("button", { type: "button", class: "quiet", text: "Keep them", onclick: () => outcome.replaceChildren() })));
  });
  return { button, label };
}

async function jobsView(ws, params) {
  const filters = {
    kind: params.get("kind") || "",
    status: params.get("status") || "",
    searched: SEARCH.some((name) => params.has(name)),
  };
  const before = params.get("before") || "";
  const base = `/workspaces/${ws}/jobs`;
  // The first page asked for at once, beside the kinds, the caller's standing and the
  // stream (whose reset reads it again): the list paints without them in turn.
  let early = api("GET", base, { query: pageQuery() });
  early.catch(() => {});
  const standing = standingIn(ws);
  standing.catch(() => {});
  const known = await knownKinds();
  const names = known.map((kind) => kind.name);
  let mayAct = false;
  try {
    mayAct = (await standing).may_act;
  } catch (error) {
    if (error.status !== 401) failure("Jobs not shown", error, ws);
    return;
  }
  const kindSelect = el("select", { id: "kind", name: "kind" },
    el("option", { value: "", text: "any kind" }),
    names.map((name) => el("option", { value: name, selected: name === filters.kind, text: name })));
  const statusSelect = el("select", { id: "status", name: "status" },
    el("option", { value: "", text: "any status" }),
    STATUSES.map((name) => el("option", { value: name, selected: name === filters.status, text: name })));
  const search = searchControls(ws, params, known, filters);
  const onFilter = () => {
    filters.kind = kindSelect.value;
    filters.status = statusSelect.value;
    const query = search.query();
    // Another kind: its fields are not the last kind's.
    if (kindSelect.value !== (params.get("kind") || "")) query.delete("field");
    go(`/w/${ws}/jobs${query.size ? `?${query}` : ""}`);
  };
  kindSelect.addEventListener("change", onFilter);
  statusSelect.addEventListener("change", onFilter);

  const selected = new Set();
  const rows = new Map();
  // The newest word of each job seen here: a job cancelled by the stream's event is not
  // brought back by the cancel's answer that arrives after it.
  const latest = new Map();
  function newest(job) {
    const known = latest.get(job.id);
    if (!notOlder(job, known)) return known;
    latest.set(job.id, job);
    return job;
  }
  let listed = [];
  let next = null;
  const body = el("tbody");
  const allOnPage = el("input", { type: "checkbox", id: "select-page", "aria-label": "Select every job on this page" });
  const allMatching = el("input", { type: "checkbox", id: "all-matching" });
  const reason = el("input", { type: "text", id: "bulk-reason", maxlength: 500, autocomplete: "off" });
  const cancelButton = el("button", { type: "submit", class: "danger", id: "cancel-selected", disabled: true });
  const outcome = el("p", { role: "status", id: "bulk-outcome" });
  const empty = el("p", { class: "hint", hidden: true, text: "No jobs here." });
  const pager = el("p", { class: "row" });
  const retry = bulkRetry({ base, params, selected, allMatching, reason, outcome, done: () => {
    selected.clear();
    allOnPage.checked = false;
    allMatching.checked = false;
    draw();
  } });

  function cancelLabel() {
    cancelButton.textContent = allMatching.checked
      ? "Cancel every unfinished job matching this filter"
      : `Cancel ${selected.size} selected`;
    cancelButton.disabled = !allMatching.checked && selected.size === 0;
    retry.label();
  }

  function row(job) {
    let entry = rows.get(job.id);
    if (!entry) {
      const box = el("input", { type: "checkbox", "aria-label": `Select job ${job.id}` });
      box.addEventListener("change", () => {
        if (box.checked) selected.add(job.id);
        else selected.delete(job.id);
        cancelLabel();
      });
      const link = el("a", { href: `#/w/${ws}/jobs/${job.id}` });
      const cells = {
        status: el("td", { "data-label": "Status" }), bar: el("td", { "data-label": "Progress" }),
        kind: el("td", { "data-label": "Kind" }), created: el("td", { "data-label": "Created" }),
      };
      const tr = el("tr", { "data-job-id": job.id },
        mayAct ? el("td", { "data-label": "Select" }, box) : "", el("td", { class: "text", "data-label": "Job" }, link),
        cells.kind, cells.status, cells.bar, cells.created);
      entry = { tr, box, link, cells };
      rows.set(job.id, entry);
    }
    const { link, cells, box } = entry;
    link.textContent = job.summary || `${job.kind} ${job.id}`;
    cells.kind.textContent = job.kind;
    cells.status.replaceChildren(statusBadge(job), stuckFlag(job) || "");
    cells.bar.replaceChildren(bar(job, `Progress of ${job.summary || job.kind}`), " ",
      el("span", { class: "num", text: `${n(job.processed)} / ${n(job.total)}` }));
    cells.created.replaceChildren(when(job.created_at));
    box.checked = selected.has(job.id);
    return entry.tr;
  }

  let drawing = false;
  function draw() {
    if (drawing) return;
    drawing = true;
    requestAnimationFrame(() => {
      drawing = false;
      const shown = new Set(listed.map((job) => job.id));
      for (const [id, entry] of rows) {
        if (!shown.has(id)) { entry.tr.remove(); rows.delete(id); selected.delete(id); }
      }
      // Rows already in place stay put: a row moved is a row blurred, and j/k lost its place.
      listed.map(row).forEach((tr, at) => {
        if (body.children[at] !== tr) body.insertBefore(tr, body.children[at] || null);
      });
      empty.hidden = listed.length > 0;
      cancelLabel();
      painted("jobs");
    });
  }

  // Changes that came while a read was under way: applied again on top of what it read
  // (which may be older than they are).
  let during = null;
  // One read at a time: one asked for while another is under way follows it.
  let reading = false;
  let again = false;
  async function load() {
    if (reading) { again = true; return; }
    reading = true;
    during = [];
    try {
      const page = await (early || api("GET", base, { query: pageQuery() }));
      early = null;
      searchError.replaceChildren();
      listed = page.jobs.map(newest).filter((job) => matches(job, filters));
      for (const id of during) listed = merged(listed, latest.get(id), filters, !before) || listed;
      during = null;
      next = page.next;
      const link = (cursor) => { const q = filterQuery(cursor); return `#/w/${ws}/jobs${q.size ? `?${q}` : ""}`; };
      pager.replaceChildren(
        before ? el("a", { href: link(""), text: "First page" }) : "",
        next ? el("a", { href: link(next), id: "older", text: "Next page" }) : "",
      );
      draw();
    } catch (error) {
      during = null;
      if (error.status === 422 || error.status === 400) {
        // A search the API refuses is said, with its code: never an empty list.
        searchError.replaceChildren(`${error.message} `, el("code", { id: "search-code", text: error.code }));
        listed = [];
        draw();
      } else if (error.status !== 401) {
        failure("Jobs not shown", error, ws);
      }
    } finally {
      early = null;
      reading = false;
      if (again) { again = false; load(); }
    }
  }

  // The address's filters and search, as the API takes them; ``cursor`` the page's.
  function filterQuery(cursor) {
    const query = new URLSearchParams();
    for (const [name, value] of params) if (name !== "before") query.append(name, value);
    if (cursor) query.set("before", cursor);
    return query;
  }
  function pageQuery() {
    const query = filterQuery(before);
    query.set("limit", JOBS_PAGE);
    return query;
  }
  const searchError = el("p", { class: "error", role: "alert", id: "search-error" });

  allOnPage.addEventListener("change", () => {
    for (const job of listed) {
      if (allOnPage.checked) selected.add(job.id);
      else selected.delete(job.id);
    }
    draw();
  });
  allMatching.addEventListener("change", cancelLabel);

  // How many a cancel would touch, read before it runs: the ticked jobs, or the unfinished
  // ones the filter matches (a page of at most 1,000, as one cancel takes).
  async function countToCancel() {
    if (!allMatching.checked) return { count: selected.size, more: false };
    const query = bulkCountQuery(params);
    const asked = query.getAll("status");
    const unfinished = asked.length ? asked.filter((s) => !isFinal({ status: s })) : ["queued", "running"];
    if (!unfinished.length) return { count: 0, more: false };
    query.delete("status");
    for (const status of unfinished) query.append("status", status);
    const page = await api("GET", base, { query });
    return { count: page.jobs.length, more: page.next !== null };
  }

  async function cancelNow(request) {
    cancelButton.disabled = true;
    try {
      const answer = await api("POST", `${base}/cancel`, { body: request });
      const refused = answer.results.filter((r) => r.error);
      const ended = answer.results.filter((r) => r.job && isFinal(r.job) && r.job.status !== "cancelled");
      outcome.textContent = `${n(answer.results.length - refused.length - ended.length)} cancelled` +
        (ended.length ? `, ${n(ended.length)} already finished` : "") +
        (refused.length ? `, ${n(refused.length)} refused (${refused[0].error.message})` : "") +
        (answer.more ? "; more remain: cancel again" : "");
      selected.clear();
      allOnPage.checked = false;
      allMatching.checked = false;
      for (const result of answer.results) {
        if (result.job) listed = merged(listed, newest(result.job), filters, !before) || listed;
      }
      draw();
    } catch (error) {
      outcome.textContent = `Not cancelled: ${error.message}`;
    }
    cancelLabel();
  }

  const bulk = el("form", {
    class: "row bulk",
    "aria-label": "Cancel or retry jobs",
    onsubmit: async (event) => {
      event.preventDefault();
      const request = allMatching.checked ? { filter: bulkFilter(params) } : { ids: [...selected] };
      request.reason = reason.value.trim() || null;
      let counted;
      try {
        counted = await countToCancel();
      } catch (error) {
        outcome.textContent = `Not counted: ${error.message}`;
        return;
      }
      if (counted.count === 0) {
        outcome.textContent = "Nothing to cancel: no unfinished job matches.";
        return;
      }
      // Asked first, with the count: a cancel is not taken back.
      const many = `${n(counted.count)}${counted.more ? " (the first)" : ""}`;
      const sure = el("span", { class: "confirm", role: "group", "aria-label": "Confirm the cancel" },
        `Cancel ${many} job${counted.count === 1 ? "" : "s"}? `,
        el("button", { type: "button", class: "danger", id: "confirm-cancel", text: `Yes, cancel ${many}`,
          onclick: () => { outcome.replaceChildren(); cancelNow(request); } }),
        " ",
        el("button", { type: "button", class: "quiet", text: "Keep them", onclick: () => outcome.replaceChildren() }));
      outcome.replaceChildren(sure);
    },
  },
    el("div", {}, el("label", { for: "bulk-reason", text: "Reason to cancel or retry (kept on the record)" }), reason),
    el("label", { class: "inline", for: "all-matching" }, allMatching, "every job matching this filter"),
    cancelButton, retry.button);

  titled("Jobs");
  show(
    el("h1", { text: "Jobs" }),
    el("form", { class: "row search", "aria-label": "Search", onsubmit: (e) => { e.preventDefault(); onFilter(); } },
      el("div", {}, el("label", { for: "kind", text: "Kind" }), kindSelect),
      el("div", {}, el("label", { for: "status", text: "Status" }), statusSelect),
      search.nodes),
    searchError,
    mayAct ? bulk : "",
    outcome,
    el("div", { class: "scroll" },
      el("table", { id: "jobs", class: "stack" },
        el("caption", { text: filters.searched ? "The jobs the search found; their rows stay live."
          : "Newest first; live while this page is open." }),
        el("thead", {}, el("tr", {},
          mayAct ? el("th", { scope: "col" }, allOnPage) : "",
          el("th", { scope: "col", text: "Job" }),
          el("th", { scope: "col", text: "Kind" }),
          el("th", { scope: "col", text: "Status" }),
          el("th", { scope: "col", text: "Progress" }),
          el("th", { scope: "col", text: "Created" }))),
        body)),
    empty,
    pager,
  );
  cancelLabel();
  load();
  // One stream for the whole list: a reset reads the page again, a job's change is merged.
  follow(`${base}/events`, (event) => {
    if (event.event === "reset") {
      load();
    } else if (event.event === "job") {
      const job = newest(event.data);
      if (during) during.push(job.id);
      const now = merged(listed, job, filters, !before);
      if (now === null) load();
      else { listed = now; draw(); }
    }
  }, { onRefused: (error) => failure("Jobs not shown", error, ws) });
}

// --- one job ---------------------------------------------------------------------------

function facts(pairs) {
  return el("dl", { class: "facts" },
    pairs.map(([term, value, id]) => [el("dt", { text: term }), el("dd", id ? { id } : {}, value)]));
}

async function jobView(ws, id, params) {
  const base = `/workspaces/${ws}/jobs/${id}`;
  let job;
  let mayAct = false;
  try {
    [job, { may_act: mayAct }] = await Promise.all([api("GET", `${base}/record`), standingIn(ws)]);
  } catch (error) {
    if (error.status !== 401) failure("Job not shown", error, ws);
    return;
  }
  const title = el("h1", { id: "job-title" });
  const status = el("p", { id: "job-status" });
  const progress = el("div", { class: "bar-line" });
  const message = el("p", { id: "job-message" });
  const counters = el("div");
  const timings = el("div");
  const attempts = el("div");
  const webhook = el("div");
  const actions = el("section", { "aria-labelledby": "actions-title" });
  const result = el("section", { "aria-labelledby": "result-title", hidden: true });
  const items = el("section", { "aria-labelledby": "items-title" });
  const trail = el("section", { "aria-labelledby": "trail-title" });
  // The job's trail: every action that touched it, read again when the job moves on.
  async function loadTrail() {
    try {
      const [page, me] = await Promise.all([
        api("GET", `/workspaces/${ws}/audit`, { query: { job_id: id, limit: 100 } }), standingIn(ws)]);
      trail.replaceChildren(el("h2", { id: "trail-title", text: "Who did what" }),
        auditTable("trail", "Every action that touched this job, newest first.",
          page.events.map((event) => auditRow(ws, me, event))));
    } catch (error) {
      trail.replaceChildren(el("h2", { id: "trail-title", text: "Who did what" }), el("p", { class: "error", text: error.message }));
    }
  }

  function render() {
    title.textContent = job.summary || `${job.kind} ${job.id}`;
    titled(title.textContent);
    status.replaceChildren(statusBadge(job), stuckFlag(job) || "",
      job.stuck_since ? el("span", { class: "hint", text: ` since ${job.stuck_since}: ${job.stuck_reason || ""}` }) : "");
    progress.replaceChildren(bar(job, "Progress"),
      el("span", { id: "job-done", text: `${n(job.processed)} of ${n(job.total)} done` }));
    message.textContent = job.progress_message || job.error_message || "";
    counters.replaceChildren(facts([
      ["Total", n(job.total), "count-total"], ["Processed", n(job.processed), "count-processed"],
      ["Succeeded", n(job.succeeded), "count-succeeded"], ["Skipped", n(job.skipped), "count-skipped"],
      ["Failed", n(job.failed), "count-failed"],
    ]));
    timings.replaceChildren(facts([
      ["Created", when(job.created_at)], ["Started", when(job.started_at)],
      ["Items taken", when(job.snapshot_at)], ["Finished", when(job.finished_at)],
      [job.finished_at ? "Ran for" : "Running for", job.started_at ? duration(job.started_at, job.finished_at) : "—", "duration"],
    ]));
    const run = config.temporal_ui_url
      ? el("a", {
        href: `${config.temporal_ui_url}/namespaces/${encodeURIComponent(config.namespace)}/workflows/${encodeURIComponent(job.workflow_id)}`,
        rel: "noopener noreferrer", target: "_blank", id: "temporal-link", text: "Its run in the Temporal UI",
      })
      : el("span", { class: "hint", text: "(no Temporal UI configured)" });
    attempts.replaceChildren(facts([
      // As the Temporal UI names them: each attempt a slice, "attempt" only after failures.
      ["Slices", job.attempts, "count-slices"], ["Failed attempts", job.attempts_failed],
      ["Job", idOf(job.id, "job id")],
      ...(job.source_job_id ? [["Retry of", el("a", { href: `#/w/${ws}/jobs/${job.source_job_id}`, id: "retry-of",
        text: `job ${job.source_job_id}` })]] : []), ["Workflow", idOf(job.workflow_id, "workflow id")], ["Run", run],
      ["Error", job.error_code ? `${job.error_code}: ${job.error_message || ""}` : "—"],
      ["Cancel asked", job.cancel_requested_at ? el("span", {}, when(job.cancel_requested_at),
        job.cancel_reason ? el("span", { id: "cancel-reason" }, " — ", job.cancel_reason) : "") : "—"],
    ]));
    webhook.replaceChildren(job.notify_state ? facts([
      ["State", job.notify_state, "notify-state"], ["Tries", job.notify_attempts],
      ["Last error", job.notify_last_error || "—", "notify-error"], ["Delivered", when(job.notified_at)],
    ]) : el("p", { class: "hint", text: "No completion webhook was asked for." }));
    renderActions();
    renderResult();
  }

  let actionsFor = null;
  function renderActions() {
    // Drawn again only when what can be done changes: a reason being typed stays.
    const now = `${job.status} ${job.has_failed_items} ${job.retried_by}`;
    if (now === actionsFor) return;
    actionsFor = now;
    const outcome = el("p", { role: "status", id: "action-outcome" });
    const nodes = [el("h2", { id: "actions-title", text: "Actions" })];
    if (!mayAct) {
      nodes.push(el("p", { class: "hint", id: "no-actions",
        text: "You read this workspace: cancelling and retrying are its administrators'." }));
    } else if (!isFinal(job)) {
      const reason = el("input", { type: "text", id: "cancel-reason-input", maxlength: 500, autocomplete: "off" });
      nodes.push(el("form", {
        class: "row",
        onsubmit: async (event) => {
          event.preventDefault();
          try {
            const asked = await api("DELETE", base, { query: { reason: reason.value.trim() } });
            if (notOlder(asked, job)) job = asked;
            render();
            loadTrail();
            // Said page-wide: the stream may have ended the job, and redrawn these actions.
            say(isFinal(job) ? `Cancellation asked; the job is ${job.status}.`
              : "Cancellation asked: the job stops at its next step.");
          } catch (error) {
            outcome.textContent = `Not cancelled: ${error.message}`;
          }
        },
      },
        el("div", {}, el("label", { for: "cancel-reason-input", text: "Reason" }), reason),
        el("button", { type: "submit", class: "danger", id: "cancel-job", text: "Cancel the job" })));
    } else if (job.has_failed_items && job.retried_by) {
      // Retried already: the retry is one per job, so the way on is to it.
      nodes.push(el("p", { id: "retried-by" }, "Its failed items were retried: ",
        el("a", { href: `#/w/${ws}/jobs/${job.retried_by}`, text: `job ${job.retried_by}` })));
    } else if (job.has_failed_items) {
      nodes.push(el("button", {
        type: "button",
        id: "retry-failed",
        text: `Retry the ${n(job.failed)} failed items`,
        onclick: async () => {
          try {
            const retry = await api("POST", `${base}/retry`);
            say(`Retry started: job ${retry.id}`);
            go(`/w/${ws}/jobs/${retry.id}`);
          } catch (error) {
            outcome.textContent = `Not retried: ${error.message} (${error.code})`;
          }
        },
      }));
    } else {
      nodes.push(el("p", { class: "hint", text: "Finished; nothing to retry." }));
    }
    nodes.push(outcome);
    actions.replaceChildren(...nodes);
  }

  function renderResult() {
    result.hidden = job.status !== "succeeded" || !job.result;
    if (result.hidden) return;
    const files = [...(job.result.output || []), ...(job.result.error || [])]
      .map((entry) => String(entry.url || "").split("/").pop())
      .filter((name) => name && !name.includes(".."));
    result.replaceChildren(
      el("h2", { id: "result-title", text: "Result" }),
      el("p", { class: "hint" }, "Content type: ", el("code", { text: job.result_content_type || "application/json" })),
      files.length ? el("ul", {}, files.map((name) => el("li", {},
        el("button", { type: "button", class: "quiet", text: `Download ${name}`, onclick: () => download(`${base}/files/${encodeURIComponent(name)}`, name) })))) : "",
      el("pre", { id: "result-json", text: JSON.stringify(job.result, null, 2) }),
    );
  }

  // Items by state, failed first, a page at a time.
  let itemState = params.get("state") ?? (job.failed > 0 ? "failed" : "");
  let itemAfter = 0;
  async function loadItems() {
    const stateSelect = el("select", { id: "item-state" },
      el("option", { value: "", text: "every state" }),
      ITEM_STATES.map((s) => el("option", { value: s, selected: s === itemState, text: s })));
    stateSelect.addEventListener("change", () => { itemState = stateSelect.value; itemAfter = 0; loadItems(); });
    let page;
    try {
      page = await api("GET", `${base}/items`, { query: { state: itemState, after: itemAfter, limit: ITEMS_PAGE } });
    } catch (error) {
      items.replaceChildren(el("h2", { id: "items-title", text: "Items" }), el("p", { class: "error", text: error.message }));
      return;
    }
    const rows = page.items.map((item) => el("tr", { "data-state": item.state },
      el("td", { class: "num", "data-label": "#", text: n(item.ordinal) }),
      el("td", { class: "text", "data-label": "Title", text: item.label || item.ref || "" }),
      el("td", { "data-label": "State", text: item.state }),
      el("td", { "data-label": "Code" }, item.error_code ? el("code", { text: item.error_code }) : ""),
      el("td", { class: "text", "data-label": "Message", text: item.error_message || "" })));
    items.replaceChildren(
      el("h2", { id: "items-title", text: "Items" }),
      el("div", { class: "row" }, el("div", {}, el("label", { for: "item-state", text: "State" }), stateSelect),
        el("button", { type: "button", class: "quiet", text: "Read again", onclick: () => loadItems() })),
      el("div", { class: "scroll" }, el("table", { id: "items", class: "stack" },
        el("thead", {}, el("tr", {},
          el("th", { scope: "col", text: "#" }), el("th", { scope: "col", text: "Title" }),
          el("th", { scope: "col", text: "State" }), el("th", { scope: "col", text: "Code" }),
          el("th", { scope: "col", text: "Message" }))),
        el("tbody", {}, rows))),
      rows.length ? "" : el("p", { class: "hint", text: "No items in this state." }),
      el("p", { class: "row" },
        itemAfter ? el("button", { type: "button", class: "quiet", text: "First items", onclick: () => { itemAfter = 0; loadItems(); } }) : "",
        page.next !== null ? el("button", { type: "button", class: "quiet", id: "items-next", text: "Next items", onclick: () => { itemAfter = page.next; loadItems(); } }) : ""),
    );
  }

  show(
    el("p", {}, el("a", { href: `#/w/${ws}/jobs`, text: "← Jobs" })),
    title, status, progress, message,
    el("div", { class: "panels" },
      el("section", { "aria-labelledby": "counters-title" }, el("h2", { id: "counters-title", text: "Counters" }), counters),
      el("section", { "aria-labelledby": "timings-title" }, el("h2", { id: "timings-title", text: "Timings" }), timings),
      el("section", { "aria-labelledby": "attempts-title" }, el("h2", { id: "attempts-title", text: "Attempts and run" }), attempts),
      el("section", { "aria-labelledby": "webhook-title" }, el("h2", { id: "webhook-title", text: "Completion webhook" }), webhook)),
    actions, trail, items, result,
  );
  render();
  loadItems();
  loadTrail();
  if (isFinal(job)) return;
  // One stream for the page: each change of the job, to its final event.
  follow(`${base}/events`, (event) => {
    if (notOlder(event.data, job)) job = { ...job, ...event.data };
    render();
    if (event.event !== "final") return undefined;
    // Final: its result and its items as they ended.
    api("GET", `${base}/record`).then((record) => {
      if (notOlder(record, job)) job = record;
      render();
    }).catch(() => {});
    loadItems();
    // Ended by someone's cancel: its trail has news (a job ending by itself has none).
    if (job.status === "cancelled") loadTrail();
    return "done";
  }, { resumable: true });
}

// --- the queue: overview and workers ------------------------------------------------------

// uPlot (vendored) is fetched the first time a chart is drawn: the other views never pay it.
let charting = null;
function chartLibrary() {
  if (!charting) {
    charting = new Promise((resolve, reject) => {
      document.head.append(el("link", { rel: "stylesheet", href: "vendor/uPlot.min.css" }));
      const script = el("script", { src: "vendor/uPlot.iife.min.js" });
      script.addEventListener("load", () => resolve(window.uPlot));
      script.addEventListener("error", () => { charting = null; reject(new Error("the charts did not load")); });
      document.head.append(script);
    });
  }
  return charting;
}

const SERIES_COLOURS = { succeeded: "--good", failed: "--bad", cancelled: "--warn" };

// Jobs and pages come whole: the value axis steps 1, 2, 5, 10, 20, 50, ...
const WHOLE_STEPS = Array.from({ length: 27 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

// The value axis as wide as its longest label (uPlot's is a fixed 50 px, which cut
// "20,000" to "0,000"); measured once per draw, as uPlot's own axis demo does.
function fitLabels(u, values, axisIndex, cycle) {
  const axis = u.axes[axisIndex];
  if (cycle > 1) return axis._size;
  const longest = (values || []).reduce((a, b) => (b.length > a.length ? b : a), "");
  u.ctx.font = axis.font[0];
  return Math.ceil(axis.ticks.size + axis.gap + u.ctx.measureText(longest).width / devicePixelRatio);
}

// A chart of buckets: one line per series, in the theme's colours; its figure says in words
// what it draws, for whoever does not see it.
async function chart(figure, title, buckets, series) {
  const uPlot = await chartLibrary();
  const style = getComputedStyle(document.documentElement);
  const colour = (name) => style.getPropertyValue(SERIES_COLOURS[name] || "--accent").trim();
  const muted = style.getPropertyValue("--muted").trim();
  const data = [buckets.map((b) => Date.parse(b.start) / 1000), ...series.map(([, pick]) => buckets.map(pick))];
  const sums = series.map(([name], i) => `${n(data[i + 1].reduce((a, b) => a + b, 0))} ${name}`);
  const width = Math.max(280, Math.min(figure.clientWidth || 640, 900));
  const options = {
    width, height: 180,
    axes: [{ stroke: muted }, { stroke: muted, values: (u, splits) => splits.map(n), size: fitLabels, incrs: WHOLE_STEPS }],
    series: [{}, ...series.map(([name]) => ({ label: name, stroke: colour(name), width: 2, points: { show: false } }))],
    legend: { show: true },
  };
  const plot = el("div", { class: "plot", role: "img", "aria-label": `${title}: ${sums.join(", ")}` });
  figure.replaceChildren(el("figcaption", { text: `${title} (${sums.join(", ")})` }), plot);
  return new uPlot(options, data, plot);
}

function countCell(value, label) {
  return el("td", { class: "num", "data-label": label, text: n(value) });
}

async function overviewView(ws, params) {
  const windowName = params.get("window") === "day" ? "day" : "hour";
  const base = `/workspaces/${ws}/overview`;
  // The charts' library fetched beside the overview's read, not after it.
  chartLibrary().catch(() => {});
  titled("Overview");
  const counts = el("tbody");
  const totals = el("tfoot");
  const oldest = el("p", { id: "oldest-queued" });
  const jobsFigure = el("figure", { id: "chart-jobs", class: "chart" });
  const pagesFigure = el("figure", { id: "chart-pages", class: "chart" });
  const read = el("p", { class: "hint", id: "overview-read" });
  const plots = [];
  show(
    el("h1", { text: "Overview" }),
    el("p", { class: "row", role: "group", "aria-label": "Window" },
      ["hour", "day"].map((name) => el("a", {
        href: `#/w/${ws}/overview${name === "day" ? "?window=day" : ""}`,
        "aria-current": name === windowName ? "page" : null,
        text: name === "hour" ? "Last hour" : "Last day",
      }))),
    el("div", { class: "scroll" }, el("table", { id: "overview", class: "stack" },
      el("caption", { text: `Now, and over the last ${windowName}; live while this page is open.` }),
      el("thead", {}, el("tr", {},
        ["Kind", "Queued", "Running", "Stuck", "Succeeded", "Failed", "Cancelled", "Oldest waiting"]
          .map((name) => el("th", { scope: "col", text: name })))),
      counts, totals)),
    oldest, jobsFigure, pagesFigure, read,
  );

  let reading = false;
  let again = false;
  async function load() {
    if (reading) { again = true; return; }
    reading = true;
    try {
      const overview = await api("GET", base, { query: { window: windowName } });
      const rows = overview.kinds.map((kind) => el("tr", { "data-kind": kind.kind },
        el("th", { scope: "row", "data-label": "Kind" }, el("a", { href: `#/w/${ws}/jobs?kind=${encodeURIComponent(kind.kind)}`, text: kind.kind })),
        countCell(kind.queued, "Queued"), countCell(kind.running, "Running"), countCell(kind.stuck, "Stuck"),
        countCell(kind.succeeded, "Succeeded"), countCell(kind.failed, "Failed"), countCell(kind.cancelled, "Cancelled"),
        el("td", { "data-label": "Oldest waiting" }, kind.oldest_queued
          ? el("a", { href: `#/w/${ws}/jobs/${kind.oldest_queued.job_id}` }, when(kind.oldest_queued.since)) : "—")));
      counts.replaceChildren(...rows);
      const sum = (field) => overview.kinds.reduce((total, kind) => total + kind[field], 0);
      totals.replaceChildren(el("tr", {},
        el("th", { scope: "row", "data-label": "Kind", text: "All kinds" }),
        ...["queued", "running", "stuck", "succeeded", "failed", "cancelled"].map((field) =>
          countCell(sum(field), field[0].toUpperCase() + field.slice(1))),
        el("td", { "data-label": "Oldest waiting" })));
      oldest.replaceChildren(overview.oldest_queued
        ? ["The oldest waiting job was queued ", when(overview.oldest_queued.since), ": ",
          el("a", { href: `#/w/${ws}/jobs/${overview.oldest_queued.job_id}`, text: `job ${overview.oldest_queued.job_id}` })]
        : "Nothing is waiting.");
      const per = overview.bucket_seconds === 60 ? "minute" : `${overview.bucket_seconds / 60} minutes`;
      for (const plot of plots.splice(0)) plot.destroy();
      plots.push(
        await chart(jobsFigure, `Jobs ended per ${per}`, overview.buckets,
          [["succeeded", (b) => b.succeeded], ["failed", (b) => b.failed], ["cancelled", (b) => b.cancelled]]),
        await chart(pagesFigure, `Pages done per ${per}`, overview.buckets,
          [["succeeded", (b) => b.pages.succeeded], ["failed", (b) => b.pages.failed]]));
      read.replaceChildren("Read ", when(overview.until), ".");
      painted("overview");
    } catch (error) {
      if (error.status !== 401) failure("Overview not shown", error, ws);
    } finally {
      reading = false;
      if (again) { again = false; load(); }
    }
  }

  await load();
  // Live: the workspace's one stream says when a job moved (read again at most every 2 s),
  // and the buckets move on with the clock.
  let waiting = null;
  const soon = () => { if (!waiting) waiting = setTimeout(() => { waiting = null; load(); }, 2000); };
  const ticking = setInterval(load, 30000);
  leaving.push(() => { clearInterval(ticking); clearTimeout(waiting); for (const plot of plots) plot.destroy(); });
  follow(`/workspaces/${ws}/jobs/events`, soon, { onRefused: (error) => failure("Overview not shown", error, ws) });
}

async function workersView(ws) {
  titled("Workers");
  const body = el("tbody");
  const about = el("p", { class: "hint" });
  const none = el("p", { class: "hint", hidden: true, text: "No worker has polled the job task queue." });
  const slots = (s) => (s ? `${n(s.used)} of ${n(s.used + s.available)}` : "—");
  const line = (worker) => el("tr", { "data-worker": worker.identity, "data-state": worker.state },
    el("td", { class: "text", "data-label": "Worker" }, el("code", { text: worker.identity })),
    el("td", { "data-label": "State" }, el("span", { class: `badge worker-${worker.state}`, text: worker.state })),
    el("td", { "data-label": "Last seen" }, when(worker.last_seen)),
    el("td", { "data-label": "Build" }, worker.build_id ? el("code", { text: worker.build_id }) : "—"),
    el("td", { "data-label": "Polls", text: worker.polls.join(", ") }),
    el("td", { "data-label": "Workflow slots", text: slots(worker.workflow_slots) }),
    el("td", { "data-label": "Activity slots", text: slots(worker.activity_slots) }),
    el("td", { "data-label": "Running here" }, worker.running.length
      ? worker.running.map((id) => [el("a", { href: `#/w/${ws}/jobs/${id}`, text: `job ${id.slice(0, 8)}` }), " "])
      : "—"));
  async function load() {
    try {
      const workers = await api("GET", `/workspaces/${ws}/workers`);
      about.replaceChildren("Who polls the job task queue ", el("code", { text: workers.task_queue }),
        ` (shared by every workspace); unseen for ${n(workers.gone_after_seconds)} s, a worker is gone. `,
        workers.heartbeats ? "Slots come from the workers' heartbeats." : "This server sends no worker heartbeats: no slots.");
      body.replaceChildren(...workers.workers.map(line));
      none.hidden = workers.workers.length > 0;
      return true;
    } catch (error) {
      if (error.status !== 401) failure("Workers not shown", error, ws);
      return false;
    }
  }
  show(
    el("h1", { text: "Workers" }),
    about,
    el("div", { class: "scroll" }, el("table", { id: "workers", class: "stack" },
      el("caption", { text: "Read every 5 seconds while this page is open." }),
      el("thead", {}, el("tr", {},
        ["Worker", "State", "Last seen", "Build", "Polls", "Workflow slots", "Activity slots", "Running here"]
          .map((name) => el("th", { scope: "col", text: name })))),
      body)),
    none,
  );
  if (!(await load())) return;
  // Temporal has no stream of its pollers: read every few seconds, while shown.
  const ticking = setInterval(() => { if (document.visibilityState === "visible") load(); }, 5000);
  leaving.push(() => clearInterval(ticking));
}

// --- who did what ------------------------------------------------------------------------

const ACTIONS = {
  start: "started", cancel: "cancelled", retry: "retried", bulk_cancel: "cancelled many", bulk_retry: "retried many",
  schedule_create: "created a schedule", schedule_pause: "paused a schedule", schedule_unpause: "resumed a schedule",
  schedule_trigger: "ran a schedule now", schedule_delete: "deleted a schedule", restore: "restored the workspace",
  schedule_update: "edited a schedule",
};

// One operator action as a row: when, who (you, a user, or the hub's operator), from
// where, what, why, and what it touched.
function auditRow(ws, me, event) {
  const who = event.actor_id === null ? "the hub's operator"
    : event.actor_id === me.actor_id ? "you" : `user ${event.actor_id}`;
  const counts = event.detail && event.detail.counts
    ? Object.entries(event.detail.counts).map(([name, count]) => `${n(count)} ${name.replace("_", " ")}`).join(", ") : "";
  const touched = [
    ...event.job_ids.slice(0, 3).map((id) => el("a", { href: `#/w/${ws}/jobs/${id}`, text: `job ${id.slice(0, 8)}` })),
    event.job_ids.length > 3 ? ` and ${n(event.job_ids.length - 3)} more` : "",
    event.schedule_id ? el("code", { text: event.schedule_id }) : "",
  ];
  return el("tr", { "data-action": event.action },
    el("td", { "data-label": "When" }, when(event.at)),
    el("td", { class: "text", "data-label": "Who" }, who),
    el("td", { "data-label": "From", text: event.surface }),
    el("td", { "data-label": "Did", text: ACTIONS[event.action] || event.action }),
    el("td", { class: "text", "data-label": "Why", text: event.reason || "—" }),
    el("td", { class: "text", "data-label": "Touched" }, touched.flatMap((t) => [t, " "]), counts ? `(${counts})` : ""));
}

function auditTable(id, caption, rows) {
  return el("div", { class: "scroll" }, el("table", { id, class: "stack" },
    el("caption", { text: caption }),
    el("thead", {}, el("tr", {},
      ["When", "Who", "From", "Did", "Why", "Touched"].map((name) => el("th", { scope: "col", text: name })))),
    el("tbody", {}, rows)));
}

async function activityView(ws, params) {
  titled("Activity");
  const before = params.get("before") || "";
  let page;
  let me;
  try {
    [page, me] = await Promise.all([
      api("GET", `/workspaces/${ws}/audit`, { query: { before, limit: JOBS_PAGE } }), standingIn(ws)]);
  } catch (error) {
    if (error.status !== 401) failure("Activity not shown", error, ws);
    return;
  }
  show(
    el("h1", { text: "Activity" }),
    el("p", { class: "hint", text: "Every operator action in this workspace, newest first: kept as long as its jobs." }),
    auditTable("activity", "Who did what, when, from where and why.", page.events.map((event) => auditRow(ws, me, event))),
    page.events.length ? "" : el("p", { class: "hint", text: "Nobody has acted here yet." }),
    el("p", { class: "row" },
      before ? el("a", { href: `#/w/${ws}/activity`, text: "Newest" }) : "",
      page.next ? el("a", { href: `#/w/${ws}/activity?before=${encodeURIComponent(page.next)}`, text: "Older" }) : ""),
  );
}

// --- schedules -------------------------------------------------------------------------

async function schedulesView(ws, params) {
  const base = `/workspaces/${ws}/schedules`;
  let schedules;
  let known;
  let mayAct = false;
  try {
    [schedules, { may_act: mayAct }, known] = await Promise.all([api("GET", base), standingIn(ws), knownKinds()]);
  } catch (error) {
    if (error.status !== 401) failure("Schedules not shown", error, ws);
    return;
  }
  const body = el("tbody");
  const empty = el("p", { class: "hint", hidden: schedules.length > 0, text: "No schedules in this workspace." });
  function row(schedule) {
    const last = schedule.recent_runs[0];
    const toggle = el("button", {
      type: "button",
      class: "quiet",
      text: schedule.paused ? "Resume" : "Pause",
      "aria-label": `${schedule.paused ? "Resume" : "Pause"} ${schedule.id}`,
      onclick: async () => {
        try {
          const now = await api("POST", `${base}/${schedule.id}/${schedule.paused ? "unpause" : "pause"}`);
          tr.replaceWith(row(now));
        } catch (error) {
          say(`Not changed: ${error.message}`);
        }
      },
    });
    const trigger = el("button", {
      type: "button", class: "quiet", text: "Run now", "aria-label": `Run ${schedule.id} now`,
      onclick: async () => {
        try {
          tr.replaceWith(row(await api("POST", `${base}/${schedule.id}/trigger`)));
          say("Fired: its job appears under Last once it starts.");
        } catch (error) {
          say(`Not fired: ${error.message} (${error.code})`);
        }
      },
    });
    // Deleting asks first, in the row: nothing is lost to a stray click or key.
    const remove = el("button", {
      type: "button", class: "quiet", text: "Delete", "aria-label": `Delete ${schedule.id}`,
      onclick: () => {
        const sure = el("span", { class: "confirm", role: "group", "aria-label": `Delete ${schedule.id}?` },
          `Delete ${schedule.kind}'s schedule? `,
          el("button", {
            type: "button", class: "danger", text: "Yes, delete",
            onclick: async () => {
              try {
                await api("DELETE", `${base}/${schedule.id}`);
                tr.remove();
                empty.hidden = body.children.length > 0;
                say(`Deleted ${schedule.id}.`);
              } catch (error) {
                say(`Not deleted: ${error.message} (${error.code})`);
              }
            },
          }),
          " ",
          el("button", { type: "button", class: "quiet", text: "Keep it", onclick: () => sure.replaceWith(actions()) }));
        remove.closest(".actions").replaceWith(sure);
      },
    });
    const edit = el("button", {
      type: "button", class: "quiet", text: "Edit", "aria-label": `Edit ${schedule.id}`, "aria-expanded": "false",
      onclick: () => {
        const open = tr.nextElementSibling;
        if (open && open.classList.contains("schedule-edit")) return open.querySelector("input")?.focus();
        const close = () => { form.remove(); edit.setAttribute("aria-expanded", "false"); };
        const form = scheduleEdit(base, schedule, known, mayAct ? 7 : 6, (saved) => {
          form.remove();
          tr.replaceWith(row(saved));
          const zone = saved.cron ? saved.time_zone || "UTC" : undefined;
          const next = saved.next_runs.slice(0, 3).map((at) => exact(at, zone)).join(", ");
          say(`Saved ${saved.id}: ${saved.paused ? "paused" : `next ${next}`}.`);
        }, close);
        tr.after(form);
        edit.setAttribute("aria-expanded", "true");
        form.querySelector("input").focus();
      },
    });
    const actions = () => el("span", { class: "actions" }, edit, " ", toggle, " ", trigger, " ", remove);
    // A cron reads in its own zone: so do its next firings.
    const zone = schedule.cron ? schedule.time_zone || "UTC" : undefined;
    const next = schedule.next_runs[0];
    const tr = el("tr", { "data-schedule-id": schedule.id },
      el("td", { class: "text", "data-label": "Schedule" }, idOf(schedule.id, "schedule id")),
      el("td", { "data-label": "Kind", text: schedule.kind }),
      el("td", { "data-label": "When", text: zone ? `${schedule.cron} (${zone})` : schedule.timing }),
      el("td", { "data-label": "Next", class: "next-run" }, schedule.paused || !next ? "paused" : [when(next, zone),
        el("span", { class: "hint" }, ` ${exact(next, zone)}`)]),
      el("td", { "data-label": "Last" }, last ? el("a", { href: `#/w/${ws}/jobs/${last.job_id}` }, when(last.started_at)) : "never"),
      el("td", { class: "text", "data-label": "State" }, schedule.paused ? `paused${schedule.note ? `: ${schedule.note}` : ""}` : "active"),
      mayAct ? el("td", { "data-label": "Action" }, actions()) : "");
    return tr;
  }
  body.append(...schedules.map(row));
  titled("Schedules");
  show(
    el("h1", { text: "Schedules" }),
    mayAct ? newSchedule(ws, known, params, (made) => {
      body.prepend(row(made));
      empty.hidden = true;
      say(`Schedule ${made.id} created.`);
    }) : "",
    el("div", { class: "scroll" }, el("table", { id: "schedules", class: "stack" },
      el("thead", {}, el("tr", {},
        ["Schedule", "Kind", "When", "Next", "Last", "State", ...(mayAct ? ["Action"] : [])]
          .map((name) => el("th", { scope: "col", text: name })))),
      body)),
    empty,
  );
}

// A schedule to create: its kind's payload form, a cron in a zone or an interval. The API
// checks all of it and says what is wrong with its code.
function newSchedule(ws, known, params, created) {
  const kind = known.find((k) => k.name === params.get("kind")) || known[0];
  const kindSelect = el("select", { id: "schedule-kind" },
    known.map((k) => el("option", { value: k.name, selected: k === kind, text: `${k.title} (${k.name})` })));
  kindSelect.addEventListener("change", () => go(`/w/${ws}/schedules?kind=${encodeURIComponent(kindSelect.value)}`));
  const form = scheduleFields(kind, "schedule");
  return el("details", { id: "new-schedule", open: params.has("kind") },
    el("summary", { text: "New schedule" }),
    el("form", {
      class: "card",
      novalidate: true,
      "aria-label": "New schedule",
      onsubmit: async (event) => {
        event.preventDefault();
        form.error.textContent = "";
        try {
          created(await api("POST", `/workspaces/${ws}/schedules`, { body: { kind: kind.name, ...form.body() } }));
          form.clear();
        } catch (failed) {
          form.refused(failed);
        }
      },
    },
      el("label", { for: "schedule-kind", text: "Kind" }), kindSelect,
      form.nodes,
      el("p", {}, el("button", { type: "submit", id: "create-schedule", text: "Create the schedule" })),
      form.error));
}

// A schedule's timing and its kind's payload as form fields (ids prefixed by ``prefix``),
// filled from ``schedule`` when one is edited: the new schedule's form and the edit's.
function scheduleFields(kind, prefix, schedule) {
  const text = (id, hint, value) => el("input", {
    id, type: "text", autocomplete: "off", spellcheck: "false", placeholder: hint, value,
  });
  const cron = text(`${prefix}-cron`, "0 3 * * *", schedule?.cron ?? undefined);
  const zone = text(`${prefix}-zone`, "UTC", schedule?.cron ? schedule.time_zone || "UTC" : undefined);
  const every = text(`${prefix}-every`, "1h30m", schedule?.every_seconds ? schedule.timing.replace(/^every /, "") : undefined);
  const fields = payloadFields(kind, `${prefix}-field`, schedule?.payload);
  const error = el("p", { class: "error", role: "alert", id: `${prefix}-error` });
  const nodes = [
    el("div", { class: "row" },
      el("div", {}, el("label", { for: `${prefix}-cron`, text: "Cron (five fields)" }), cron),
      el("div", {}, el("label", { for: `${prefix}-zone`, text: "Its time zone" }), zone),
      el("div", {}, el("label", { for: `${prefix}-every`, text: "Or every" }), every)),
    fields.nodes,
  ];
  // What the fields hold, as the API reads it: empty ones left out.
  function body() {
    const given = { payload: fields.payload() };
    for (const [name, input] of [["cron", cron], ["time_zone", zone], ["every", every]]) {
      if (input.value.trim()) given[name] = input.value.trim();
    }
    return given;
  }
  return {
    nodes,
    error,
    body,
    clear: () => { for (const input of [cron, zone, every]) input.value = ""; },
    refused: (failed) => error.replaceChildren(`${failed.message} `,
      el("code", { id: `${prefix}-code`, text: failed.code })),
  };
}

// A schedule edited in a row of its own under it: the new schedule's fields, filled in.
// An empty zone beside a cron is UTC; a kind the page does not know keeps its payload.
function scheduleEdit(base, schedule, known, columns, saved, closed) {
  const kind = known.find((k) => k.name === schedule.kind);
  const form = scheduleFields(kind || { payload: {} }, "edit-schedule", schedule);
  return el("tr", { class: "schedule-edit" }, el("td", { colspan: columns, "data-label": "Edit" },
    el("form", {
      class: "card",
      novalidate: true,
      "aria-label": `Edit ${schedule.id}`,
      onsubmit: async (event) => {
        event.preventDefault();
        form.error.textContent = "";
        const body = form.body();
        if (!kind) delete body.payload;
        if (body.cron && !body.time_zone) body.time_zone = null;
        try {
          saved(await api("PATCH", `${base}/${schedule.id}`, { body }));
        } catch (failed) {
          form.refused(failed);
        }
      },
    },
      el("p", { class: "hint", text: `Editing ${schedule.kind}'s schedule: what it runs and when. A paused one stays paused.` }),
      form.nodes,
      el("p", {},
        el("button", { type: "submit", id: "save-schedule", text: "Save the schedule" }), " ",
        el("button", { type: "button", class: "quiet", text: "Cancel", onclick: closed })),
      form.error)));
}

// --- starting a job -----------------------------------------------------------------------

// A field of a kind's payload schema: a nullable one (anyOf [X, null]) is X, optional.
function fieldOf(name, schema, required) {
  const plain = (schema.anyOf || []).find((choice) => choice.type !== "null") || schema;
  return { name, schema: { ...schema, ...plain }, required: required.includes(name) };
}

function control(field, id, value) {
  const { schema } = field;
  const given = value ?? schema.default ?? "";
  if (schema.enum) {
    return el("select", { id, name: field.name },
      schema.enum.map((value) => el("option", { value, selected: value === given, text: value })));
  }
  if (schema.type === "boolean") return el("input", { id, name: field.name, type: "checkbox", checked: given === true });
  if (schema.type === "integer" || schema.type === "number") {
    return el("input", { id, name: field.name, type: "number", value: given, min: schema.minimum, max: schema.maximum,
      step: schema.type === "integer" ? 1 : "any" });
  }
  if (schema.type === "string") {
    return el("input", { id, name: field.name, type: "text", value: given, autocomplete: "off", spellcheck: "false",
      placeholder: schema.format === "uuid" ? "a UUID" : null });
  }
  return el("textarea", { id, name: field.name, rows: 3, text: given === "" ? "" : JSON.stringify(given) });
}

// What a field holds, as the API reads it: empty optional fields are left out, and the
// API (not the page) says what is wrong, with its code.
function valueOf(field, input) {
  const { type } = field.schema;
  if (type === "boolean") return input.checked;
  const raw = input.value.trim();
  if (raw === "") return undefined;
  if (type === "integer" || type === "number") return Number(raw);
  if (input.tagName === "TEXTAREA") {
    try { return JSON.parse(raw); } catch { return raw; }
  }
  return raw;
}

// A kind's payload as form fields (ids prefixed by ``prefix``; filled from ``values``, a
// payload, if given), and the payload they hold.
function payloadFields(kind, prefix, values) {
  const schema = kind.payload || {};
  const fields = Object.entries(schema.properties || {})
    .map(([name, property]) => fieldOf(name, property, schema.required || []));
  const inputs = new Map(fields.map((field) => [field.name, control(field, `${prefix}-${field.name}`, values?.[field.name])]));
  for (const field of fields) {
    if (field.schema.description) inputs.get(field.name).setAttribute("aria-describedby", `${prefix}-hint-${field.name}`);
  }
  const nodes = fields.map((field) => [
    el("label", { for: `${prefix}-${field.name}` }, field.schema.title || field.name, field.required ? " (required)" : ""),
    field.schema.description ? el("p", { class: "hint", id: `${prefix}-hint-${field.name}`, text: field.schema.description }) : "",
    inputs.get(field.name),
  ]);
  function payload() {
    const given = {};
    for (const field of fields) {
      const value = valueOf(field, inputs.get(field.name));
      if (value !== undefined) given[field.name] = value;
    }
    return given;
  }
  return { nodes, payload };
}

async function startView(ws, params) {
  let known;
  let mayAct = false;
  try {
    [known, { may_act: mayAct }] = await Promise.all([knownKinds(), standingIn(ws)]);
  } catch (error) {
    if (error.status !== 401) failure("Start not shown", error, ws);
    return;
  }
  titled("Start a job");
  if (!mayAct) {
    show(el("h1", { text: "Start a job" }),
      el("p", { class: "hint", id: "no-actions", text: "You read this workspace: starting jobs is its administrators'." }));
    return;
  }
  const kind = known.find((k) => k.name === params.get("kind")) || known[0];
  const kindSelect = el("select", { id: "start-kind" },
    known.map((k) => el("option", { value: k.name, selected: k === kind, text: `${k.title} (${k.name})` })));
  kindSelect.addEventListener("change", () => go(`/w/${ws}/start?kind=${encodeURIComponent(kindSelect.value)}`));
  const fields = payloadFields(kind, "field");
  const error = el("p", { class: "error", role: "alert", id: "start-error" });
  const form = el("form", {
    class: "card",
    novalidate: true,
    "aria-labelledby": "start-title",
    onsubmit: async (event) => {
      event.preventDefault();
      error.textContent = "";
      try {
        const job = await api("POST", `/workspaces/${ws}/jobs/${encodeURIComponent(kind.name)}`, { body: fields.payload() });
        say(`Started: job ${job.id}`);
        go(`/w/${ws}/jobs/${job.id}`);
      } catch (failed) {
        error.replaceChildren(`${failed.message} `, el("code", { id: "start-code", text: failed.code }));
      }
    },
  },
    el("h1", { id: "start-title", text: "Start a job" }),
    el("label", { for: "start-kind", text: "Kind" }), kindSelect,
    el("p", { class: "hint", text: kind.help || "" }),
    fields.nodes,
    el("p", {}, el("button", { type: "submit", id: "start-job", text: `Start ${kind.title}` })),
    error);
  show(form);
}

// --- theme and keys ---------------------------------------------------------------------

// The reader's choice when made (kept in this browser), else the system's.
const darkSystem = matchMedia("(prefers-color-scheme: dark)");
const themeButton = document.getElementById("theme");
function applyTheme() {
  const dark = (localStorage.getItem(THEME) || (darkSystem.matches ? "dark" : "light")) === "dark";
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  themeButton.setAttribute("aria-pressed", String(dark));
}
themeButton.addEventListener("click", () => {
  localStorage.setItem(THEME, document.documentElement.dataset.theme === "dark" ? "light" : "dark");
  applyTheme();
});
darkSystem.addEventListener("change", applyTheme);
applyTheme();

// Keys only move and open (a link's Enter): an action always asks for its own click.
function moveRow(step) {
  const links = [...main.querySelectorAll("tbody tr a[href]")];
  if (!links.length) return;
  const at = links.indexOf(document.activeElement);
  const to = at < 0 ? (step > 0 ? 0 : links.length - 1) : Math.min(links.length - 1, Math.max(0, at + step));
  links[to].focus();
}
document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey || help.open) return;
  if (event.target.closest("input, select, textarea, [contenteditable]")) return;
  if (event.key === "/") {
    const search = main.querySelector("[data-search]");
    if (search) { event.preventDefault(); search.focus(); }
  } else if (event.key === "j" || event.key === "k") {
    event.preventDefault();
    moveRow(event.key === "j" ? 1 : -1);
  } else if (event.key === "?") {
    event.preventDefault();
    help.showModal();
  }
});
document.getElementById("help-close").addEventListener("click", () => help.close());

// --- start ------------------------------------------------------------------------------

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN);
  signedOut("Signed out.");
});
// The page as an address shows it, signing in first when it is a sign-in link.
function arrive() {
  return signInByLink()
    .catch((failed) => `${failed.message}`)
    .then((message) => route(message));
}

window.addEventListener("hashchange", () => arrive());
const configured = fetch("/operator/config", { credentials: "omit" })
  .then((response) => response.json())
  .then((given) => { config = given; })
  .catch(() => {});
// Only signing in and a job's page read the config: a signed-in tab opening another view
// asks for its data beside it.
const needsConfig = !token() || /\/jobs\/[0-9a-f]|[?&]login=/i.test(location.hash);
(needsConfig ? configured : Promise.resolve()).then(() => {
  arrive();
  setTimeout(() => { n(0); exact(Date.now()); ago(Date.now()); });
});
