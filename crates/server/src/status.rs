//! `GET /`: the live status page, and `GET /status/stream`, the status it draws.
//!
//! The page is one self-contained HTML document (no external assets, so it works offline
//! and behind a firewall). It opens `/status/stream`, a Server-Sent Events stream of the
//! graph's state (every component with its wiring, state, counters, gauges and last error,
//! and the approvals its agents wait on, once a second), and draws the wiring graph with
//! each component coloured by its state, a table of rates and counters, the approvals
//! waiting (oldest first, with Allow and Deny buttons that post a `control.answer`), the
//! agents seen in the signals (program, state, current tool, tokens), and a live tail of
//! signals from `/ws` with a type filter and a pause. A token given to the page
//! (`/?token=…`) is passed on to every request it makes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::http::AppState;

/// How often the status stream sends the graph's state.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The page: a shell whose script fills everything in from the streams.
pub(crate) fn page(name: &str) -> String {
    PAGE.replace("{{NAME}}", &html(name))
}

/// One status event: the sidecar and every component of the graph.
fn status_json(state: &AppState) -> String {
    json!({
        "sidecar": state.name,
        "listen": state.local.to_string(),
        "seq": state.hub.last_seq(),
        "clients": state.hub.client_count(),
        "overall": state.telemetry.overall(),
        "components": state.telemetry.snapshot(),
        "approvals": state.telemetry.approvals().pending(),
    })
    .to_string()
}

/// `GET /status/stream`: the status as SSE, now and then every second, until the sidecar
/// stops.
pub(crate) fn stream(state: Arc<AppState>) -> Response {
    let events = futures_util::stream::unfold(
        (state, true),
        |(state, first): (Arc<AppState>, bool)| async move {
            if !first {
                tokio::time::sleep(STATUS_EVERY).await;
            }
            // The sidecar is stopping: end the stream, so that it never holds up shutdown.
            if state.hub.is_closed() {
                return None;
            }
            let event = format!("event: status\ndata: {}\n\n", status_json(&state));
            Some((Ok::<_, Infallible>(Bytes::from(event)), (state, false)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response()
}

fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page. `{{NAME}}` is the sidecar's name (escaped).
const PAGE: &str = r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>patchbay · {{NAME}}</title>
<style>
:root{--ok:#1a7f37;--failed:#cf222e;--recovering:#bc4c00;--starting:#6e7781;--stopped:#6e7781;--line:#d0d7de}
body{font:14px system-ui,-apple-system,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
header{display:flex;gap:1.5em;align-items:baseline;padding:.8em 1.2em;background:#fff;border-bottom:1px solid var(--line)}
header h1{font-size:1.1em;margin:0}header code{background:#f0f2f4;padding:0 .3em;border-radius:3px}
#conn{margin-left:auto}#conn.live{color:var(--ok)}#conn.down{color:var(--failed)}
main{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1em;padding:1em 1.2em}
section{background:#fff;border:1px solid var(--line);border-radius:6px;padding:.6em .8em;min-width:0}
h2{font-size:.95em;margin:.2em 0 .6em;color:#57606a;text-transform:uppercase;letter-spacing:.04em}
#graph svg{width:100%;height:auto}
.node rect{fill:#fff;stroke-width:2}.node text{font-size:12px}.node .t{fill:#57606a;font-size:11px}
.edge{fill:none;stroke:#8c959f;stroke-width:1.3}.edge.dropped{stroke-dasharray:5 4}.edge.inbound{stroke-dasharray:2 3}
.ok rect{stroke:var(--ok)}.failed rect{stroke:var(--failed);fill:#ffebe9}.recovering rect{stroke:var(--recovering);fill:#fff8c5}
.starting rect,.stopped rect{stroke:var(--starting)}
table{border-collapse:collapse;width:100%}td,th{padding:.25em .5em;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
th{font-weight:600;color:#57606a;font-size:.9em}td.n{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600}.state.ok{color:var(--ok)}.state.failed{color:var(--failed)}.state.recovering{color:var(--recovering)}
.state.starting,.state.stopped,.state.waiting{color:var(--starting)}.state.degraded{color:var(--recovering)}.detail{color:#57606a;font-size:.9em;word-break:break-word}
#components{grid-column:1/2}#tailbox{grid-column:2/3;grid-row:1/3;display:flex;flex-direction:column;max-height:calc(100vh - 6em)}
#tailbar{display:flex;gap:.5em;margin-bottom:.5em}#tailbar input{flex:1;font:inherit;padding:.2em .4em}
#tail{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;overflow:auto;flex:1;margin:0;list-style:none;padding:0}
#tail li{padding:.15em 0;border-bottom:1px solid #f0f2f4;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#tail .k{color:#0550ae;font-weight:600}#tail .s{color:#57606a}
#approvals,#agents{grid-column:1/2}#approvals.waiting{border-color:var(--recovering);background:#fff8c5}
#approvals li{display:flex;gap:.6em;align-items:baseline;padding:.3em 0;border-bottom:1px solid #eaeef2}
#approvals code{font-size:12px;word-break:break-all}#approvals .none{color:#57606a}
#approvals button{font:inherit;padding:.1em .8em}button.allow{color:var(--ok)}button.deny{color:var(--failed)}
</style></head><body>
<header><h1>patchbay <code>{{NAME}}</code></h1><span id="overall" class="state"></span><span id="where"></span><span id="seq"></span>
<span id="conn" class="down">connecting…</span></header>
<main>
<section id="approvals"><h2>Approvals waiting</h2><ol id="pending"><li class="none">nothing waits</li></ol></section>
<section id="graph"><h2>Wiring</h2><svg id="svg" role="img" aria-label="wiring graph"></svg></section>
<section id="tailbox"><h2>Signals</h2>
<div id="tailbar"><input id="filter" placeholder="type filter: text_delta, tool_*, …" aria-label="type filter">
<button id="pause" type="button">Pause</button></div><ol id="tail" reversed></ol></section>
<section id="components"><h2>Components</h2><table><thead><tr><th>component</th><th>type</th><th>state</th>
<th>in/s</th><th>out/s</th><th>received</th><th>sent</th><th>dropped</th><th>bad</th><th>detail</th></tr></thead>
<tbody id="rows"></tbody></table></section>
<section id="agents"><h2>Agents</h2><table><thead><tr><th>agent</th><th>program</th><th>state</th>
<th>tool</th><th>tokens</th></tr></thead><tbody id="agentrows"></tbody></table></section>
</main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const withToken = (path) => token ? path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : path;
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
let previous = new Map(), previousAt = 0, shape = "";

function rates(c, now) {
  const p = previous.get(c.name), dt = (now - previousAt) / 1000;
  if (!p || dt <= 0) return ["", ""];
  return [((c.received - p.received) / dt).toFixed(0), ((c.sent - p.sent) / dt).toFixed(0)];
}

function drawTable(components, now) {
  $("rows").innerHTML = components.map((c) => {
    const [rin, rout] = rates(c, now);
    const note = [c.detail, c.last_error].filter(Boolean).join(" — ");
    return `<tr data-component="${esc(c.name)}" data-state="${esc(c.state)}"><td>${esc(c.name)}</td><td>${esc(c.type)}</td>` +
      `<td class="state ${esc(c.state)}">${esc(c.state)}</td><td class="n">${rin}</td><td class="n">${rout}</td>` +
      `<td class="n">${c.received}</td><td class="n">${c.sent}</td><td class="n">${c.dropped}</td>` +
      `<td class="n">${c.bad_input}</td><td class="detail">${esc(note)}</td></tr>`;
  }).join("");
}

// Layered layout: a node's column is one past the deepest of its inputs.
function drawGraph(components) {
  const byName = new Map(components.map((c) => [c.name, c]));
  const edges = [];
  for (const c of components) {
    for (const input of c.inputs || []) {
      // `NAME`, or a port of a filter: `NAME.dropped`, `NAME.<branch>`.
      let from = input, kind = "";
      if (!byName.has(input) && input.includes(".")) {
        from = input.slice(0, input.lastIndexOf("."));
        kind = input.endsWith(".dropped") ? "dropped" : "";
      }
      if (byName.has(from)) edges.push({from, to: c.name, kind});
    }
    if (c.name.endsWith(".inbound")) {
      const owner = c.name.slice(0, -".inbound".length);
      if (byName.has(owner)) edges.push({from: owner, to: c.name, kind: "inbound"});
    }
  }
  const depth = new Map();
  const depthOf = (name, seen = new Set()) => {
    if (depth.has(name)) return depth.get(name);
    if (seen.has(name)) return 0;
    seen.add(name);
    const c = byName.get(name);
    const ins = edges.filter((e) => e.to === name && e.kind !== "inbound").map((e) => e.from);
    const d = c.role === "source" || ins.length === 0 ? 0 : 1 + Math.max(...ins.map((i) => depthOf(i, seen)));
    depth.set(name, d);
    return d;
  };
  components.forEach((c) => depthOf(c.name));
  const columns = [];
  for (const c of components) (columns[depth.get(c.name)] ||= []).push(c);
  const W = 170, H = 44, GX = 60, GY = 18, pos = new Map();
  columns.forEach((col, x) => col.forEach((c, y) => pos.set(c.name, {x: 10 + x * (W + GX), y: 10 + y * (H + GY)})));
  // Room below the last row for the curves from an output back to its inbound side.
  const width = 20 + columns.length * (W + GX) - GX, height = 50 + Math.max(1, ...columns.map((c) => c.length)) * (H + GY) - GY;
  const svg = $("svg");
  const key = components.map((c) => c.name + ":" + (c.inputs || []).join(",")).join("|");
  if (key !== shape) {
    shape = key;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.innerHTML = '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8c959f"/></marker></defs>' + edges.map((e) => {
      const a = pos.get(e.from), b = pos.get(e.to);
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      const low = Math.max(a.y, b.y) + H + 28;
      const d = e.kind === "inbound" ? `M${a.x + W / 2},${a.y + H} C${a.x + W / 2},${low} ${b.x + W / 2},${low} ${b.x + W / 2},${b.y + H}` : `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`;
      return `<path class="edge ${e.kind}" d="${d}" marker-end="url(#arrow)"/>`;
    }).join("") + components.map((c) => {
      const p = pos.get(c.name);
      return `<g class="node" data-node="${esc(c.name)}" transform="translate(${p.x},${p.y})"><rect width="${W}" height="${H}" rx="6"/>` +
        `<text x="10" y="18">${esc(c.name)}</text><text class="t" x="10" y="34">${esc(c.type)}</text></g>`;
    }).join("");
  }
  for (const c of components) {
    const g = svg.querySelector(`[data-node="${CSS.escape(c.name)}"]`);
    if (g) g.setAttribute("class", "node " + c.state);
  }
}

// What waits, oldest first, each with buttons that answer it through the sidecar's ingest
// (the sidecar's `NAME.inbound` must reach the agent component, as it does for any UI).
function drawApprovals(approvals) {
  $("approvals").className = approvals.length ? "waiting" : "";
  $("pending").innerHTML = approvals.length ? approvals.map((a) =>
    `<li data-prompt="${esc(a.promptId)}"><strong>${esc(a.toolName)}</strong>` +
    `<span class="s">${esc(a.program)} · ${esc(a.agentId)} · ${new Date(a.requestedAtMs).toISOString().slice(11, 19)}</span>` +
    `<code>${esc(JSON.stringify(a.input))}</code>` +
    `<button type="button" class="allow" data-value="allow">Allow</button>` +
    `<button type="button" class="deny" data-value="deny">Deny</button></li>`).join("")
    : '<li class="none">nothing waits</li>';
}
$("pending").addEventListener("click", async (event) => {
  const button = event.target.closest("button");
  const item = button && button.closest("li[data-prompt]");
  if (!item) return;
  item.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  const answer = {type: "control.answer", payload: {promptId: item.dataset.prompt, value: button.dataset.value}};
  const headers = {"Content-Type": "application/json"};
  if (token) headers.Authorization = "Bearer " + token;
  const reply = await fetch("/signal", {method: "POST", headers, body: JSON.stringify(answer)}).catch(() => null);
  if (!reply || !reply.ok) item.querySelectorAll("button").forEach((b) => { b.disabled = false; });
});

// The agents seen in the signals, by `agentId`.
const agents = new Map();
function track(signal) {
  const p = signal.payload || {};
  if (typeof p.agentId !== "string" || !p.agentId) return;
  const a = agents.get(p.agentId) || {program: String(signal.source || "").split(":")[0], state: "", tool: "", tokens: 0};
  if (signal.type === "agent_state_change") a.state = p.to;
  else if (signal.type === "tool_call") a.tool = p.toolName;
  else if (signal.type === "tool_result") a.tool = "";
  else if (signal.type === "token_usage") a.tokens += (p.promptTokens || 0) + (p.completionTokens || 0);
  agents.set(p.agentId, a);
  $("agentrows").innerHTML = [...agents].map(([id, a]) =>
    `<tr data-agent="${esc(id)}"><td>${esc(id)}</td><td>${esc(a.program)}</td><td class="state">${esc(a.state)}</td>` +
    `<td>${esc(a.tool)}</td><td class="n">${a.tokens}</td></tr>`).join("");
}

function connectStatus() {
  const source = new EventSource(withToken("/status/stream"));
  source.addEventListener("status", (event) => {
    const status = JSON.parse(event.data), now = Date.now();
    $("conn").textContent = "live"; $("conn").className = "live";
    $("where").innerHTML = `<code>${esc(status.listen)}</code> · ${status.clients} client(s)`;
    $("seq").textContent = "seq " + status.seq;
    // The daemon as a whole, as /health says it: its word, and which components are not working.
    const o = status.overall, lists = ["failed", "recovering", "starting", "waiting", "done"]
      .filter((k) => (o[k] || []).length).map((k) => `${k}: ${o[k].join(", ")}`);
    $("overall").textContent = o.status + (lists.length ? ` (${lists.join("; ")})` : "");
    $("overall").className = "state " + o.status;
    drawGraph(status.components);
    drawTable(status.components, now);
    drawApprovals(status.approvals || []);
    previous = new Map(status.components.map((c) => [c.name, c])); previousAt = now;
  });
  source.onerror = () => { $("conn").textContent = "reconnecting…"; $("conn").className = "down"; };
}

let paused = false, held = [], lastSeq = null;
const MAX_TAIL = 300;
function matches(type) {
  const f = $("filter").value.trim();
  if (!f) return true;
  return f.split(",").map((p) => p.trim()).filter(Boolean).some((p) => p.endsWith("*") ? type.startsWith(p.slice(0, -1)) : type === p);
}
function show(signal) {
  if (!matches(signal.type)) return;
  const li = document.createElement("li");
  const t = new Date(signal.timestamp).toISOString().slice(11, 23);
  li.innerHTML = `<span class="s">${t}</span> <span class="k">${esc(signal.type)}</span> <span class="s">${esc(signal.source)}</span> ${esc(JSON.stringify(signal.payload))}`;
  li.dataset.type = signal.type;
  const tail = $("tail");
  tail.insertBefore(li, tail.firstChild);
  while (tail.children.length > MAX_TAIL) tail.removeChild(tail.lastChild);
}
function connectTail() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const since = lastSeq === null ? "" : "since=" + lastSeq;
  const ws = new WebSocket(scheme + "//" + location.host + withToken("/ws" + (since ? "?" + since : "")));
  ws.onmessage = (event) => {
    const frame = JSON.parse(event.data);
    if (!frame.type) return;
    lastSeq = frame.metadata && frame.metadata.seq !== undefined ? frame.metadata.seq : lastSeq;
    track(frame);
    if (paused) { held.push(frame); if (held.length > MAX_TAIL) held.shift(); } else show(frame);
  };
  ws.onclose = () => setTimeout(connectTail, 1000);
}
$("pause").onclick = () => {
  paused = !paused;
  $("pause").textContent = paused ? "Resume" : "Pause";
  if (!paused) { held.forEach(show); held = []; }
};
connectStatus();
connectTail();
</script></body></html>
"##;
