//! `GET /`: a small self-contained status page (no external assets).

use std::fmt::Write;
use std::net::SocketAddr;

use patchbay_graph::Telemetry;

/// The page: every component's state and counters, refreshed every two seconds.
pub(crate) fn page(name: &str, local: SocketAddr, telemetry: &Telemetry, seq: u64) -> String {
    let mut rows = String::new();
    for c in telemetry.snapshot() {
        let state = serde_json::to_value(c.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let role = serde_json::to_value(c.role)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let gauges: Vec<String> = c.gauges.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let note = [c.detail.as_deref(), c.last_error.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" — ");
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{state}\">{state}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            html(&c.name),
            html(&c.type_name),
            role,
            c.received,
            c.sent,
            c.dropped,
            c.bad_input,
            html(&gauges.join(" ")),
            html(&note),
        );
    }
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">\
         <title>patchbay · {title}</title><style>\
         body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse}}td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}}\
         .ok{{color:#080}}.failed{{color:#b00}}.recovering{{color:#b60}}.stopped,.starting{{color:#666}}\
         code{{background:#f4f4f4;padding:0 .3em}}</style></head><body>\
         <h1>patchbay sidecar <code>{title}</code></h1>\
         <p>Listening on <code>{local}</code> · last seq {seq} · \
         <code>ws://{local}/ws</code> · <code>http://{local}/events</code> · \
         <a href=\"/health\">/health</a> · <a href=\"/metrics\">/metrics</a></p>\
         <table><tr><th>component</th><th>type</th><th>role</th><th>state</th><th>received</th>\
         <th>sent</th><th>dropped</th><th>bad input</th><th>gauges</th><th>detail</th></tr>{rows}</table>\
         </body></html>",
        title = html(name),
    )
}

fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
