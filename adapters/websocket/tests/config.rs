//! Config checks of the generic `websocket` and `sse` sources (no I/O: `compile` only).

use patchbay_graph::{Registry, SourceText, compile};

fn errors(source: &str) -> String {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_ndjson::ADAPTER);
    registry.adapter(&patchbay_websocket::ADAPTER);
    registry.adapter(&patchbay_sse::ADAPTER);
    let config =
        format!("[sources.s]\n{source}\n[outputs.out]\ntype = \"stdout\"\ninputs = [\"s\"]\n");
    match compile(&[SourceText::new("s.toml", config)], &registry) {
        Ok(_) => String::new(),
        Err(diagnostics) => format!("{diagnostics:?}"),
    }
}

#[test]
fn websocket_options() {
    let ok = "type = \"websocket\"\nurl = \"ws://127.0.0.1:9/x\"\nheaders = { Authorization = \"Bearer t\" }\nmax_attempts = 3\nping_interval_ms = 0";
    assert_eq!(errors(ok), "");
    // TLS upstreams are taken, with an extra CA file if need be.
    assert_eq!(errors(&ok.replace("ws://", "wss://")), "");
    assert_eq!(errors(&format!("{ok}\nca_file = \"ca.pem\"")), "");
    assert!(errors(&ok.replace("ws://", "http://")).contains("ws://"));
    assert!(errors(&ok.replace("max_attempts = 3", "max_attempts = 0")).contains("at least 1"));
    assert!(errors(&ok.replace("Authorization", "\"Bad Header\"")).contains("header name"));
    assert!(!errors(&format!("{ok}\nretries = 2")).is_empty());
}

#[test]
fn sse_options() {
    let ok = "type = \"sse\"\nurl = \"http://127.0.0.1:9/events\"\nheaders = { \"X-Key\" = \"k\" }\nbackoff_initial_ms = 10\nbackoff_max_ms = 100\nidle_timeout_ms = 5000";
    assert_eq!(errors(ok), "");
    assert_eq!(errors(&ok.replace("http://", "https://")), "");
    assert!(errors(&ok.replace("http://", "ws://")).contains("http:// or https://"));
    assert!(
        errors(&ok.replace("backoff_max_ms = 100", "backoff_max_ms = 1"))
            .contains("at least `backoff_initial_ms`")
    );
    let unknown = errors(&format!("{ok}\nping_interval_ms = 2"));
    assert!(
        unknown.contains("unknown field `ping_interval_ms`"),
        "{unknown}"
    );
    assert!(
        errors(&ok.replace("idle_timeout_ms = 5000", "idle_timeout_ms = 0")).contains("at least 1")
    );
}
