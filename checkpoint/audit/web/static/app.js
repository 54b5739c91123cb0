// warden audit: the auditor's read-only view. Plain JavaScript, no build step, no library.
// Every text from the log is put into the page with textContent (never as HTML), so a record
// holding markup shows it as text; the server's Content-Security-Policy forbids inline script too.
"use strict";

const KEY = "warden-audit-token";
const MAX_ROWS = 500;
const SVG = "http://www.w3.org/2000/svg";
let token = sessionStorage.getItem(KEY) || "";
let me = null;
let streamGeneration = 0;
let streamAbort = null;
let chainTimer = null;

// -- small helpers --------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (name === "class") node.className = value;
    else if (name === "onclick") node.addEventListener("click", value);
    else if (name.startsWith("data-")) node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function short(text, n) {
  text = text === null || text === undefined ? "" : String(text);
  return text.length > n ? text.slice(0, n) + "…" : text;
}

function json(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

class Unauthorized extends Error {}

async function api(path, params, signal) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== "" && value !== null && value !== undefined) query.set(name, value);
  }
  const url = path + (query.toString() ? "?" + query : "");
  const answer = await fetch(url, { headers: { Authorization: "Bearer " + token }, signal, cache: "no-store" });
  if (answer.status === 401) throw new Unauthorized("not logged in");
  const body = await answer.json();
  if (!answer.ok) {
    const error = new Error(body.message || body.code || String(answer.status));
    error.status = answer.status;
    error.code = body.code;
    throw error;
  }
  return body;
}

// -- logging in -----------------------------------------------------------------------------

async function login(given) {
  token = given;
  try {
    me = await api("/api/me");
  } catch (error) {
    token = "";
    sessionStorage.removeItem(KEY);
    $("login-error").textContent = error instanceof Unauthorized
      ? "That token is not one the checkpoint knows." : "Refused: " + error.message;
    return;
  }
  sessionStorage.setItem(KEY, token);
  $("login-error").textContent = "";
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = me.caller + " (" + me.principal + ") · tenants: "
    + (me.tenants === null ? "all" : me.tenants.join(", "));
  startStream();
  startChain();
  const link = linked();
  if (link.run) openRun(link.run);
}

// A notification links here as #run=RUN_ID&decision=DECISION_ID: the run opens at that decision.
function linked() {
  const params = new URLSearchParams(location.hash.slice(1));
  return { run: params.get("run"), decision: params.get("decision") };
}

function logout(message) {
  token = "";
  me = null;
  sessionStorage.removeItem(KEY);
  streamGeneration++;
  if (streamAbort) streamAbort.abort();
  if (chainTimer) clearTimeout(chainTimer);
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  $("chain-badge").hidden = true;
  $("login-error").textContent = message || "";
}

function failed(error) {
  if (error instanceof Unauthorized) logout("Your token is no longer accepted: log in again.");
  return error;
}

// -- the decision stream --------------------------------------------------------------------

function filters() {
  const out = {};
  for (const field of $("filters").elements) {
    if (field.name && field.value.trim()) out[field.name] = field.value.trim();
  }
  return out;
}

// DENY and HALT refuse the call: their rows carry a text marker, not only a colour, so a reader who
// cannot tell the colours apart (or a screen reader) still finds them.
function isRefused(r) { return r.verdict === "DENY" || r.verdict === "HALT"; }

function refusedMark(r) {
  return isRefused(r) ? el("span", { class: "refused-mark", title: "refused" }, "✖ refused: ") : null;
}

function recordRow(r) {
  const runCell = r.run_id
    // run ids share their time-ordered head: the tail tells them apart; the whole id is the title
    ? el("button", { type: "button", class: "link run-link", title: r.run_id, onclick: () => openRun(r.run_id) },
      r.run_id.length > 16 ? "…" + r.run_id.slice(-12) : r.run_id)
    : "";
  return el("tr", { "data-seq": r.seq, class: isRefused(r) ? "refused" : "" },
    el("td", {}, r.seq), el("td", {}, r.time),
    el("td", {}, refusedMark(r), el("span", { class: "verdict-" + r.verdict }, r.verdict)),
    el("td", {}, r.code || ""), el("td", {}, r.action), el("td", {}, r.tool || ""),
    el("td", {}, r.agent || ""), el("td", {}, runCell), el("td", {}, r.accountable_person || ""),
    el("td", {}, r.rule || ""), el("td", { class: "args" }, short(json(r.arguments), 300)),
    el("td", { class: "reason" }, short(r.reason, 300)));
}

function showRecords(records, fresh) {
  const body = $("stream").tBodies[0];
  for (const r of records) {
    const row = recordRow(r);
    if (fresh) row.classList.add("new");
    body.prepend(row);  // newest first
  }
  while (body.rows.length > MAX_ROWS) body.deleteRow(body.rows.length - 1);
  $("stream-count").textContent = String(body.rows.length);
}

async function startStream() {
  const generation = ++streamGeneration;
  if (streamAbort) streamAbort.abort();
  streamAbort = new AbortController();
  const signal = streamAbort.signal;
  const chosen = filters();
  $("stream").tBodies[0].replaceChildren();
  $("stream-count").textContent = "0";
  let cursor;
  try {
    const first = await api("/api/decisions", { ...chosen, limit: 200 }, signal);
    if (generation !== streamGeneration) return;
    showRecords(first.records, false);
    cursor = first.cursor;
  } catch (error) {
    if (generation === streamGeneration) $("stream-status").textContent = "error: " + failed(error).message;
    return;
  }
  $("stream-status").textContent = "live";
  // Long polling by seq cursor: each request waits up to 20 s for records after the cursor.
  while (generation === streamGeneration) {
    try {
      const next = await api("/api/decisions", { ...chosen, after: cursor, wait: 20, limit: 500 }, signal);
      if (generation !== streamGeneration) return;
      showRecords(next.records, true);
      cursor = next.cursor;
      $("stream-status").textContent = "live";
    } catch (error) {
      if (generation !== streamGeneration) return;
      failed(error);
      if (!token) return;
      $("stream-status").textContent = "reconnecting: " + error.message;
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
}

// -- runs -----------------------------------------------------------------------------------

function runsFilters() {
  const out = {};
  for (const field of $("runs-filter").elements) {
    if (!field.name) continue;
    if (field.type === "checkbox") { if (field.checked) out[field.name] = "1"; }
    else if (field.value.trim()) out[field.name] = field.value.trim();
  }
  return out;
}

async function showRuns() {
  const body = $("runs").tBodies[0];
  $("runs-error").textContent = "";
  try {
    const answer = await api("/api/runs", { ...runsFilters(), limit: 200 });
    body.replaceChildren(...answer.runs.map((r) => el("tr", { "data-run": r.run_id, class: r.denied || r.halted ? "refused" : "" },
      el("td", {}, r.time),
      el("td", {}, el("button", { type: "button", class: "link run-link", onclick: () => openRun(r.run_id) }, r.run_id)),
      el("td", { class: "run-status" }, r.status),
      el("td", { class: "run-decisions" }, r.decisions),
      el("td", { class: "run-denied" }, r.denied ? el("span", { class: "refused-mark", title: "refused" }, "✖ ") : null, r.denied),
      el("td", { class: "run-halted" }, r.halted ? el("span", { class: "refused-mark", title: "refused" }, "✖ ") : null, r.halted),
      el("td", {}, r.agent || ""), el("td", {}, short(r.agent_version, 12)), el("td", {}, r.person || ""),
      el("td", {}, r.tenant || ""))));
    $("runs-count").textContent = String(answer.runs.length);
  } catch (error) {
    body.replaceChildren();
    $("runs-count").textContent = "0";
    $("runs-error").textContent = failed(error).message;
  }
}

function describe(r) {
  const parts = [r.time, r.verdict, r.code || "", r.action];
  if (r.tool) parts.push("tool " + r.tool);
  if (r.caller && (r.action === "approval" || r.action === "rejection")) parts.push("by " + r.caller);
  if (r.reason) parts.push("— " + short(r.reason, 200));
  return "#" + r.seq + " " + parts.filter(Boolean).join(" · ");
}

function treeList(nodes, parent, selected) {
  const children = nodes.filter((n) => (n.parent_run_id || null) === parent);
  if (!children.length) return null;
  return el("ul", {}, ...children.map((n) => {
    const label = [n.agent || "(person)", short(n.agent_version, 12), n.records + " records",
      n.status ? "status " + n.status : "no end yet",
      n.breaker_trips ? n.breaker_trips + " breaker trip(s)" : "",
      n.approvals ? n.approvals + " approval act(s)" : ""].filter(Boolean).join(" · ");
    return el("li", { class: n.run_id === selected ? "selected" : "", "data-run": n.run_id },
      el("div", { class: "node" },
        el("button", { type: "button", class: "link", onclick: () => openRun(n.run_id) }, n.run_id), " ", label),
      treeList(nodes, n.run_id, selected));
  }));
}

async function openRun(runId) {
  selectTab("run");
  $("run-id").value = runId;
  $("run-error").textContent = "";
  let run;
  try {
    run = await api("/api/runs/" + encodeURIComponent(runId));
  } catch (error) {
    $("run-view").hidden = true;
    $("run-error").textContent = error.status === 404 ? "No such run." : failed(error).message;
    return;
  }
  $("run-view").hidden = false;
  $("run-title").textContent = run.run_id + (run.root_run_id !== run.run_id ? " (tree of " + run.root_run_id + ")" : "");
  $("run-truncated").hidden = !run.truncated;
  $("run-truncated").textContent = run.truncated ? "Only the first " + run.limit + " records of this tree are shown." : "";
  // A run whose parent is not among the records shown (a cut tree) is drawn as a root.
  const ids = new Set(run.tree.map((n) => n.run_id));
  const nodes = run.tree.map((n) => ({ ...n, parent_run_id: ids.has(n.parent_run_id) ? n.parent_run_id : null }));
  $("run-tree").replaceChildren(treeList(nodes, null, run.run_id) || el("p", { class: "note" }, "no runs"));
  const list = (items, empty) => (items.length ? items.map((r) => el("li", {}, describe(r))) : [el("li", { class: "note" }, empty)]);
  $("run-refusals").replaceChildren(...(run.refusals.length
    ? run.refusals.map((r) => el("li", { "data-decision": r.decision_id }, refusedMark(r), describe(r)))
    : [el("li", { class: "note" }, "none")]));
  $("run-breakers").replaceChildren(...list(run.breaker_trips, "none"));
  $("run-approvals").replaceChildren(...list(run.approvals, "none"));
  $("run-timeline").replaceChildren(...run.timeline.map((r) => {
    const trip = r.verdict === "HALT" && (r.code || "").startsWith("breaker_");
    const approval = r.action === "approval" || r.action === "rejection" || r.verdict === "REQUIRE_APPROVAL";
    const target = r.decision_id === linked().decision ? " linked" : "";
    return el("li", { class: (trip ? "trip" : approval ? "approval" : "") + target, "data-decision": r.decision_id },
      refusedMark(r), describe(r),
      r.arguments && Object.keys(r.arguments).length ? el("div", { class: "args" }, short(json(r.arguments), 400)) : null);
  }));
  const target = document.querySelector("#run-timeline li.linked");
  if (target) target.scrollIntoView({ block: "center" });
}

// -- the chain ------------------------------------------------------------------------------

async function checkChain() {
  if (!token) return;
  try {
    const s = await api("/api/verify");
    const status = $("chain-status");
    const badge = $("chain-badge");
    status.className = "status " + (s.ok ? "chain-ok" : "chain-broken");
    status.textContent = s.ok
      ? "WHOLE: " + s.checked + " records verified, head seq " + s.head_seq
      : "BROKEN at seq " + s.broken_seq + ": " + s.reason;
    badge.hidden = false;
    badge.className = "badge " + (s.ok ? "ok" : "broken");
    badge.textContent = s.ok ? "chain whole" : "chain BROKEN";
    const rows = [["checked at", s.checked_at], ["records checked", s.checked], ["head seq", s.head_seq],
      ["head hash", s.head_hash], ["signed heads", s.anchors + (s.anchors_note ? " (" + s.anchors_note + ")" : "")]];
    if (!s.ok) rows.push(["broken seq", s.broken_seq], ["reason", s.reason], ["detail", s.detail]);
    $("chain-details").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v === null ? "" : v)]));
  } catch (error) {
    failed(error);
    $("chain-status").textContent = "cannot check: " + error.message;
  }
}

function startChain() {
  if (chainTimer) clearTimeout(chainTimer);
  // as often as the server walks the chain again, and at least once a second
  const every = Math.max(1, me && typeof me.verify_interval === "number" ? me.verify_interval : 5) * 1000;
  const tick = async () => {
    await checkChain();
    if (token) chainTimer = setTimeout(tick, every);
  };
  tick();
}

// -- agent versions -------------------------------------------------------------------------

const SEGMENTS = [["succeeded", "#2da44e"], ["failed", "#cf222e"], ["cancelled", "#8c959f"], ["open", "#0969da"]];

function chart(versions) {
  const rowHeight = 28, labelWidth = 230, barWidth = 420, infoWidth = 330;
  const height = 34 + versions.length * rowHeight;
  const most = Math.max(1, ...versions.map((v) => v.runs));
  const root = svg("svg", { width: labelWidth + barWidth + infoWidth, height, role: "img",
    "aria-label": "runs of each agent version by outcome" });
  SEGMENTS.forEach(([name, colour], i) => {
    root.append(svg("rect", { x: labelWidth + i * 100, y: 6, width: 12, height: 12, fill: colour }));
    root.append(svg("text", { x: labelWidth + i * 100 + 16, y: 17, "font-size": 12 }, name));
  });
  versions.forEach((v, i) => {
    const y = 30 + i * rowHeight;
    root.append(svg("text", { x: 4, y: y + 15, "font-size": 12, class: "chart-label" },
      short(v.agent, 14) + " @ " + short(v.version, 12)));
    let x = labelWidth;
    for (const [name, colour] of SEGMENTS) {
      const count = v[name];
      if (!count) continue;
      const width = (count / most) * barWidth;
      const bar = svg("rect", { x, y, width: Math.max(width, 1), height: rowHeight - 8, fill: colour,
        class: "bar", "data-agent": v.agent, "data-version": v.version, "data-kind": name, "data-count": count });
      bar.append(svg("title", {}, v.agent + " " + v.version + ": " + count + " " + name));
      root.append(bar);
      x += width;
    }
    const trips = Object.values(v.breaker_trips).reduce((a, b) => a + b, 0);
    root.append(svg("text", { x: labelWidth + barWidth + 8, y: y + 15, "font-size": 12 },
      v.runs + " runs · " + v.paused + " paused · " + trips + " breaker trips · avg " + v.average_tokens + " tokens"));
  });
  return root;
}

async function showStats() {
  try {
    const answer = await api("/api/stats");
    $("chart").replaceChildren(answer.versions.length ? chart(answer.versions) : el("p", { class: "note" }, "No runs yet."));
    $("stats").tBodies[0].replaceChildren(...answer.versions.map((v) => el("tr", {},
      el("td", {}, v.agent), el("td", {}, short(v.version, 16)), el("td", {}, v.runs), el("td", {}, v.succeeded),
      el("td", {}, v.failed), el("td", {}, v.cancelled), el("td", {}, v.open), el("td", {}, v.paused),
      el("td", {}, Object.entries(v.breaker_trips).map(([k, n]) => k + " " + n).join(", ")),
      el("td", {}, v.average_tokens))));
  } catch (error) {
    $("chart").replaceChildren(el("p", { class: "error" }, failed(error).message));
  }
}

// -- tabs and wiring ------------------------------------------------------------------------

function selectTab(name) {
  for (const button of document.querySelectorAll("nav button")) {
    button.classList.toggle("active", button.dataset.tab === name);
  }
  for (const section of document.querySelectorAll(".tab")) section.hidden = section.id !== "tab-" + name;
  if (name === "runs") showRuns();
  if (name === "agents") showStats();
  if (name === "chain") checkChain();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    login($("token").value.trim());
    $("token").value = "";
  });
  $("logout").addEventListener("click", () => logout(""));
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); startStream(); });
  $("filters").addEventListener("reset", () => setTimeout(startStream, 0));
  $("runs-filter").addEventListener("submit", (event) => { event.preventDefault(); showRuns(); });
  $("runs-filter").addEventListener("reset", () => setTimeout(showRuns, 0));
  $("run-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if ($("run-id").value.trim()) openRun($("run-id").value.trim());
  });
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => selectTab(button.dataset.tab));
  }
  if (token) login(token);
});
