// akadzed's status page (docs/status-page.md). Reads the daemon's JSON API
// (api/status, api/jobs/ID) and draws two views: the overview (#/) and a
// job's page (#/jobs/ID), refreshed every 5 seconds. Actions (pause, resume,
// cancel, requeue) are offered when the daemon says they are on; they send
// the admin token the operator typed as a Bearer header.
//
// Every value from the API reaches the DOM as text (textContent, text
// nodes, setAttribute of plain attributes): nothing is ever parsed as HTML,
// so task names, error messages and meta cannot inject markup. Paths are
// relative, so the page works behind a proxy under any prefix.
"use strict";

const REFRESH_MS = 5000;
const TOKEN_KEY = "akadzed-admin-token";
let timer = null;
let generation = 0;  // a view's fetches that return after a route change are dropped

// el("td", {class: "n"}, "text", child...): an element with attributes and
// children (strings become text nodes; null and false are skipped).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

function showError(message) {
  const banner = document.getElementById("error-banner");
  banner.textContent = message || "";
  banner.hidden = !message;
}

function showResult(message, failed) {
  const line = document.getElementById("action-result");
  line.textContent = message;
  line.className = failed ? "failed" : "";
  line.hidden = false;
}

async function getJson(path) {
  let response;
  try {
    response = await fetch(path, {headers: {Accept: "application/json"}, cache: "no-store"});
  } catch (e) {
    throw new Error("the daemon did not answer (" + e.message + ")");
  }
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    throw new Error("HTTP " + response.status + " without JSON");
  }
  if (!response.ok) throw new Error(body && body.error ? body.error : "HTTP " + response.status);
  return body;
}

// An action: POST with the token; its answer goes to the status line.
async function act(path) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  if (!token) {
    showResult("type the admin token in the header first", true);
    return;
  }
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: {"Content-Type": "application/json", Authorization: "Bearer " + token},
      body: "{}",
      cache: "no-store",
    });
    const body = await response.json().catch(() => ({}));
    if (response.ok) showResult(body.message || "done", false);
    else showResult(body.error || "HTTP " + response.status, true);
  } catch (e) {
    showResult("the daemon did not answer (" + e.message + ")", true);
  }
  route();
}

function actionButton(label, path, danger) {
  return el("button", {type: "button", class: danger ? "danger" : null, onclick: () => act(path)}, label);
}

// ---- formatting

function age(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 1) return (seconds * 1000).toFixed(0) + " ms";
  if (seconds < 90) return seconds.toFixed(1) + " s";
  if (seconds < 5400) return (seconds / 60).toFixed(0) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

function count(n, capped) {
  return capped ? n.toLocaleString("en") + "+" : n.toLocaleString("en");
}

function time(iso) {
  if (!iso) return "—";
  return iso.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function limit(n) {
  return n === null || n === undefined ? "∞" : String(n);
}

function table(id, headers, rows, emptyText) {
  const body = rows.length
    ? rows
    : [el("tr", {class: "empty"}, el("td", {colspan: headers.length}, emptyText || "none"))];
  return el("table", {id},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {scope: "col"}, h)))),
    el("tbody", {}, body));
}

function section(title, ...content) {
  return el("section", {}, el("h2", {}, title), content);
}

// ---- the overview

// Finished per minute, last hour: one bar per minute, failed stacked on
// succeeded (cancelled on top).
function chart(minutes) {
  const width = 180, height = 32, bar = width / 60;
  let top = 1, succeeded = 0, failed = 0, cancelled = 0;
  for (const m of minutes) {
    top = Math.max(top, m.succeeded + m.failed + m.cancelled);
    succeeded += m.succeeded;
    failed += m.failed;
    cancelled += m.cancelled;
  }
  const graphic = svg("svg", {class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img"});
  const title = svg("title");
  title.textContent = `last hour: ${succeeded} succeeded, ${failed} failed, ${cancelled} cancelled (peak ${top}/min)`;
  graphic.append(title, svg("line", {x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis"}));
  minutes.forEach((m, i) => {
    let y = height;
    for (const [value, kind] of [[m.succeeded, "ok"], [m.failed, "bad"], [m.cancelled, "off"]]) {
      if (!value) continue;
      const h = Math.max(1, (value / top) * (height - 2));
      y -= h;
      graphic.append(svg("rect", {x: i * bar + 0.25, y, width: bar - 0.5, height: h, class: kind}));
    }
  });
  return {graphic, succeeded, failed, cancelled};
}

function queueRows(status) {
  return status.queues.map((q) => {
    const c = chart(q.finished_per_minute);
    const actions = status.actions.enabled
      ? (q.paused
        ? actionButton("Resume", "api/queues/" + encodeURIComponent(q.queue) + "/resume")
        : actionButton("Pause", "api/queues/" + encodeURIComponent(q.queue) + "/pause"))
      : null;
    return el("tr", {class: q.paused ? "paused" : null},
      el("td", {class: "name"}, q.queue),
      el("td", {}, q.paused ? "paused since " + time(q.paused_at) : "active"),
      el("td", {class: "n"}, count(q.ready, q.ready_capped)),
      el("td", {class: "n"}, count(q.scheduled, q.scheduled_capped)),
      el("td", {class: "n"}, q.max_running === null ? String(q.running) : `${q.running} / ${q.max_running}`),
      el("td", {class: "n"}, age(q.oldest_ready_age_seconds)),
      el("td", {class: "chart-cell"}, c.graphic,
        el("span", {class: "totals"}, `${c.succeeded} succeeded, ${c.failed} failed`)),
      status.actions.enabled ? el("td", {}, actions) : null);
  });
}

// What holds back vacuum of akadze.jobs (docs/status-page.md): each holder by
// what identifies its kind, never a query.
function horizonSection(horizon) {
  const rows = horizon.holders.map((h) => el("tr", {},
    el("td", {}, h.kind.replaceAll("_", " ")),
    el("td", {class: "n"}, h.pid === null ? "—" : String(h.pid)),
    el("td", {class: "name"}, h.slot_name || h.gid || h.application_name || "—"),
    el("td", {}, h.hidden ? "(hidden)" : (h.state || "—")),
    el("td", {}, h.backend_type || "—"),
    el("td", {}, time(h.xact_start)),
    el("td", {class: "n"}, h.age_seconds === null ? "unknown" : age(h.age_seconds)),
    el("td", {class: "n"}, String(h.xid_age))));
  const more = horizon.holders_total - horizon.holders.length;
  return section("Database horizon (what holds back vacuum)",
    table("horizon", ["holder", "pid", "name", "state", "backend type", "transaction started", "held for", "transactions since"],
      rows, "nothing has held it back for more than a second"),
    more > 0 ? el("p", {class: "muted"}, `${more} more holders`) : null,
    horizon.stats_visible ? null : el("p", {class: "muted"},
      "The daemon's role cannot see other roles' sessions (grant it pg_read_all_stats): their state and start are hidden."));
}

function renderOverview(status) {
  const queueHeaders = ["queue", "state", "ready", "scheduled", "running / cap", "oldest ready", "finished per minute, last hour"];
  if (status.actions.enabled) queueHeaders.push("");
  const held = status.held_keys.map((h) => el("tr", {}, el("td", {class: "name"}, h.key), el("td", {class: "n"}, count(h.queued, h.queued_capped))));
  const more = status.held_keys_total - status.held_keys.length;
  return [
    section("Queues", table("queues", queueHeaders, queueRows(status)),
      status.queues_truncated ? el("p", {class: "muted"}, "More queues than shown.") : null),
    section("Limit keys in use", table("limits", ["key", "limits row", "running / max", "starts / max"],
      status.limits.map((l) => el("tr", {},
        el("td", {class: "name"}, l.key),
        el("td", {}, l.row === null ? "held (no row)" : l.row),
        el("td", {class: "n"}, `${l.running} / ${limit(l.max_running)}`),
        el("td", {class: "n"}, `${l.starts} / ${limit(l.max_starts)}`))))),
    section("Keys held (queued jobs, no limits row)", table("held-keys", ["key", "queued"], held),
      more > 0 ? el("p", {class: "muted"}, `${more} more keys held`) : null),
    section("Workers", table("workers", ["worker", "host", "pid", "queues", "started", "heartbeat", "running"],
      status.workers.map((w) => el("tr", {},
        el("td", {title: w.id}, w.id.slice(0, 8)),
        el("td", {}, w.hostname),
        el("td", {class: "n"}, String(w.pid)),
        el("td", {}, w.queues.join(", ")),
        el("td", {}, time(w.started_at)),
        el("td", {class: "n"}, age(w.heartbeat_age_seconds) + " ago"),
        el("td", {class: "n"}, String(w.running)))))),
    horizonSection(status.horizon),
    section("Recent failures", table("failures", ["job", "task", "queue", "attempts", "finished", "error", "message"],
      status.recent_failures.map((f) => el("tr", {class: "failure"},
        el("td", {}, el("a", {href: "#/jobs/" + f.id}, "#" + f.id)),
        el("td", {class: "name"}, f.task),
        el("td", {}, f.queue),
        el("td", {class: "n"}, `${f.attempt}/${f.max_attempts}`),
        el("td", {}, time(f.finished_at)),
        el("td", {}, f.error_kind || "—"),
        el("td", {class: "message"}, f.error_message || "")))))];
}

// ---- a job's page

function renderJob(job, actionsEnabled) {
  const fields = [
    ["state", el("span", {class: "state " + job.state}, job.state)],
    ["task", job.task], ["queue", job.queue], ["priority", String(job.priority)],
    ["attempt", `${job.attempt} of ${job.max_attempts}`], ["runs", String(job.run_count)],
    ["snoozes", String(job.snoozes)], ["limit key", job.limit_key || "—"],
    ["unique key", job.unique_key || "—"], ["worker", job.worker_id || "—"],
    ["expires", time(job.expires_at)]];
  const timeline = [["created", job.created_at], ["run at", job.run_at], ["started", job.started_at],
    ["cancel requested", job.cancel_requested_at], ["finished", job.finished_at]]
    .filter(([, at]) => at);
  const actions = [];
  if (actionsEnabled && (job.state === "queued" || job.state === "running")) {
    actions.push(actionButton("Cancel", "api/jobs/" + job.id + "/cancel", true));
  }
  if (actionsEnabled && job.state === "failed") actions.push(actionButton("Requeue", "api/jobs/" + job.id + "/requeue"));
  const errors = Array.isArray(job.errors) ? job.errors : [];
  return [el("section", {id: "job"},
    el("p", {}, el("a", {href: "#/"}, "← all queues")),
    el("h2", {}, `Job ${job.id}`),
    actions.length ? el("p", {class: "actions"}, actions) : null,
    job.progress === null || job.progress === undefined ? null : el("p", {class: "progress"},
      el("progress", {max: 1, value: Math.min(1, Math.max(0, job.progress))}),
      " " + Math.round(Math.min(1, Math.max(0, job.progress)) * 100) + "%"),
    el("dl", {class: "fields"}, fields.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("h3", {}, "Timeline"),
    el("ol", {class: "timeline"}, timeline.map(([k, at]) => el("li", {}, el("span", {class: "when"}, time(at)), " " + k))),
    el("h3", {}, "Errors"),
    errors.length
      ? el("ol", {class: "errors"}, errors.map((e) => el("li", {},
        el("strong", {}, e && e.error ? String(e.error) : "?"), ": ", e && e.message ? String(e.message) : "")))
      : el("p", {class: "muted"}, "none"),
    el("h3", {}, "Meta"),
    el("pre", {class: "meta"}, JSON.stringify(job.meta, null, 2)),
    el("p", {class: "muted"}, "Args and results are never shown here."))];
}

// ---- routing and refresh

let actionsEnabled = false;

async function load(view, mine) {
  let content;
  if (view.kind === "job") {
    const [job, status] = await Promise.all([getJson("api/jobs/" + view.id), getJson("api/status")]);
    actionsEnabled = status.actions.enabled;
    content = renderJob(job, actionsEnabled);
  } else {
    const status = await getJson("api/status");
    actionsEnabled = status.actions.enabled;
    content = renderOverview(status);
  }
  if (mine !== generation) return;
  document.getElementById("view").replaceChildren(...content);
  document.getElementById("token-box").hidden = !actionsEnabled;
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
  document.body.dataset.loaded = view.kind;
  showError("");
}

function parseRoute() {
  const match = /^#\/jobs\/(\d+)$/.exec(location.hash);
  return match ? {kind: "job", id: match[1]} : {kind: "overview"};
}

async function route() {
  clearTimeout(timer);
  const mine = ++generation;
  const view = parseRoute();
  try {
    await load(view, mine);
  } catch (e) {
    if (mine !== generation) return;
    showError(e.message);
    if (view.kind === "job" && document.body.dataset.loaded !== "job") {
      document.getElementById("view").replaceChildren(el("p", {}, el("a", {href: "#/"}, "← all queues")));
    }
  }
  if (mine === generation) timer = setTimeout(route, REFRESH_MS);
}

function start() {
  const token = document.getElementById("token");
  token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  token.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, token.value.trim()));
  document.getElementById("go-to-job").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = document.getElementById("job-id").value.trim();
    if (/^\d+$/.test(id)) location.hash = "#/jobs/" + id;
    else showError("a job id is a positive integer");
  });
  window.addEventListener("hashchange", () => {
    delete document.body.dataset.loaded;
    document.getElementById("action-result").hidden = true;
    route();
  });
  route();
}

start();
