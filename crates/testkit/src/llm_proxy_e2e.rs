//! The LLM tap proxy end to end, shared by the root test `tests/llm_proxy.rs` (the real
//! binary) and the proxy adapter's tests (the same graph run in process).
//!
//! Peers: a replay upstream written here (axum) serving the recorded captures of
//! `tests/fixtures/{openai,anthropic}/*.sse` (the request's `model` names the capture),
//! `llmock` from PyPI as a fault-injecting second upstream (429s, truncated and cut
//! streams, latency), and the official `openai` and `anthropic` Python SDKs as clients
//! (`tests/support/llm/sdk_call.py`, in the venv `tests/support/llm/setup.sh` makes).
//! Each SDK call is made against the upstream directly and through the proxy: the outputs
//! must be equal, and the signals patchbay wrote must match what the SDK got.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::scratch::ScratchDir;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Failure guard of every wait (never a timed assertion).
pub const GUARD: Duration = Duration::from_secs(60);

/// The repository root (where `tests/support/llm` lives).
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        if dir.join("tests/support/llm/setup.sh").is_file() {
            return dir;
        }
        if !dir.pop() {
            panic!("tests/support/llm/setup.sh not found above CARGO_MANIFEST_DIR");
        }
    }
}

/// The venv's python, after running `tests/support/llm/setup.sh` (which skips what is
/// installed). Panics naming the script when it fails.
pub fn python() -> PathBuf {
    let root = repo_root();
    let venv = root.join("target/pyenv");
    let script = root.join("tests/support/llm/setup.sh");
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(&venv)
        .stdout(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => venv.join("bin/python"),
        other => panic!(
            "the LLM test peers are not installed and `bash tests/support/llm/setup.sh` failed ({other:?}): it needs python3 with venv and PyPI access (openai, anthropic, llmock)"
        ),
    }
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until something accepts TCP connections on `port`.
pub async fn wait_listening(port: u16) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listens on 127.0.0.1:{port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A temporary directory for one test, removed when the guard is dropped.
pub fn temp_dir(tag: &str) -> ScratchDir {
    ScratchDir::new(&format!("llm-{tag}"))
}

// ---------------------------------------------------------------------------------------
// The replay upstream.

/// What the replay upstream saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Slow streams whose client went away before their end.
    pub cancelled: AtomicUsize,
    /// `authorization` / `x-api-key` values received, to check keys pass through.
    pub keys: std::sync::Mutex<Vec<String>>,
}

/// A running replay upstream.
pub struct Replay {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// What it saw.
    pub seen: Arc<Seen>,
}

/// The capture a model name selects, as its SSE events (each ending with its blank
/// line), or `None` for an unknown model.
fn capture(api: &str, model: &str) -> Option<Vec<String>> {
    let path = repo_root()
        .join("tests/fixtures")
        .join(api)
        .join(format!("{model}.sse"));
    let text = std::fs::read_to_string(path).ok()?;
    let mut events: Vec<String> = text.split_inclusive("\n\n").map(str::to_owned).collect();
    // The Anthropic captures have no newline at the end: the last event gets its end.
    if let Some(last) = events.last_mut()
        && !last.ends_with("\n\n")
    {
        last.push_str(if last.ends_with('\n') { "\n" } else { "\n\n" });
    }
    Some(events)
}

/// A whole (non-streaming) OpenAI chat completion.
pub fn whole_openai() -> Value {
    json!({
        "id": "chatcmpl-whole-1", "object": "chat.completion", "created": 1727346200,
        "model": "whole-openai",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null,
            "message": {"role": "assistant", "content": "Checking the weather.",
                "tool_calls": [{"id": "call_whole", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}
    })
}

/// A whole (non-streaming) Anthropic message.
pub fn whole_anthropic() -> Value {
    json!({
        "id": "msg_whole_1", "type": "message", "role": "assistant", "model": "whole-anthropic",
        "content": [
            {"type": "text", "text": "Let me look that up."},
            {"type": "tool_use", "id": "toolu_whole", "name": "get_weather", "input": {"location": "Paris"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 40, "output_tokens": 12}
    })
}

/// Counts a slow stream dropped before its end.
struct CancelGuard {
    seen: Arc<Seen>,
    done: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.done {
            self.seen.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn sse_response(chunks: Vec<String>, pause: Duration, guard: Option<CancelGuard>) -> Response {
    let stream = futures_util::stream::unfold(
        (chunks.into_iter(), guard),
        move |(mut chunks, mut guard)| async move {
            let Some(chunk) = chunks.next() else {
                if let Some(g) = guard.as_mut() {
                    g.done = true;
                }
                return None;
            };
            tokio::time::sleep(pause).await;
            Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), (chunks, guard)))
        },
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("response")
}

fn replay_answer(
    api: &'static str,
    seen: &Arc<Seen>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    for name in ["authorization", "x-api-key"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            seen.keys.lock().expect("lock").push(v.to_owned());
        }
    }
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let stream = request["stream"].as_bool() == Some(true);
    if model == "slow" {
        let chunk = |i: usize| {
            format!(
                "data: {{\"id\":\"chatcmpl-slow\",\"object\":\"chat.completion.chunk\",\"model\":\"slow\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i} \"}},\"finish_reason\":null}}]}}\n\n"
            )
        };
        let guard = CancelGuard {
            seen: seen.clone(),
            done: false,
        };
        return sse_response(
            (0..3000).map(chunk).collect(),
            Duration::from_millis(20),
            Some(guard),
        );
    }
    if !stream {
        let whole = match api {
            "openai" if model == "whole-openai" => Some(whole_openai()),
            "anthropic" if model == "whole-anthropic" => Some(whole_anthropic()),
            _ => None,
        };
        if let Some(whole) = whole {
            return (
                [(header::CONTENT_TYPE, "application/json")],
                whole.to_string(),
            )
                .into_response();
        }
    }
    match capture(api, &model) {
        Some(events) if stream => sse_response(events, Duration::from_millis(2), None),
        _ => {
            let body = if api == "openai" {
                json!({"error": {"message": format!("The model `{model}` does not exist"), "type": "invalid_request_error", "code": "model_not_found"}})
            } else {
                json!({"type": "error", "error": {"type": "not_found_error", "message": format!("model: {model}")}})
            };
            (
                StatusCode::NOT_FOUND,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
    }
}

/// Starts the replay upstream on a free loopback port.
pub async fn start_replay() -> Replay {
    let seen = Arc::new(Seen::default());
    let (s1, s2) = (seen.clone(), seen.clone());
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async {
                axum::Json(json!({"object": "list", "data": [
                    {"id": "openai-python-chat-stream-plain-text", "object": "model", "owned_by": "replay"},
                    {"id": "py-basic_response", "object": "model", "owned_by": "replay"}]}))
            }),
        )
        .route(
            "/v1/chat/completions",
            post(move |headers: HeaderMap, body: Bytes| async move {
                replay_answer("openai", &s1, &headers, &body)
            }),
        )
        .route(
            "/v1/messages",
            post(move |headers: HeaderMap, body: Bytes| async move {
                replay_answer("anthropic", &s2, &headers, &body)
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind replay");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Replay {
        url: format!("http://{addr}"),
        seen,
    }
}

// ---------------------------------------------------------------------------------------
// llmock, the SDKs, raw HTTP.

/// A running `llmock serve` (killed on drop).
pub struct Llmock {
    /// Its base URL.
    pub url: String,
    port: u16,
    _child: tokio::process::Child,
}

/// Starts `llmock serve` from the venv on a free port.
pub async fn start_llmock(python: &Path) -> Llmock {
    let port = free_port();
    let llmock = python.with_file_name("llmock");
    let child = tokio::process::Command::new(llmock)
        .args(["serve", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args([
            "--log-level",
            "warning",
            "--tool-mode",
            "off",
            "--response-style",
            "static",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("llmock starts (tests/support/llm/setup.sh installs it)");
    wait_listening(port).await;
    Llmock {
        url: format!("http://127.0.0.1:{port}"),
        port,
        _child: child,
    }
}

impl Llmock {
    /// The base URL of an API's routes (llmock serves Anthropic under `/anthropic`).
    pub fn base(&self, api: &str) -> String {
        if api == "anthropic" {
            format!("{}/anthropic", self.url)
        } else {
            self.url.clone()
        }
    }

    /// Queues llmock behaviours (`/_llmock/scenario`).
    pub async fn queue(&self, behaviors: Value) {
        let (status, body) = http(
            self.port,
            "POST",
            "/_llmock/scenario",
            &[],
            &json!({"behaviors": behaviors}).to_string(),
        )
        .await;
        assert_eq!(status, 201, "llmock refused the scenario: {body}");
    }
}

/// One HTTP/1.1 request with `Connection: close`: the status and the raw body.
pub async fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let headers: Vec<(&str, &str)> = [("content-type", "application/json")]
        .into_iter()
        .chain(headers.iter().copied())
        .collect();
    let mut request = crate::process::request_head(
        method,
        path,
        &format!("127.0.0.1:{port}"),
        &headers,
        body.len(),
    );
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    let _ = tokio::time::timeout(GUARD, stream.read_to_end(&mut response)).await;
    crate::process::status_and_body(&response)
}

/// Starts a streaming request on the proxy, reads the first body bytes, then hangs up.
pub async fn hang_up_mid_stream(port: u16) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let body = r#"{"model":"slow","stream":true,"messages":[{"role":"user","content":"count"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nuser-agent: hang-up-client\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: ") {
        let n = tokio::time::timeout(GUARD, stream.read(&mut buf))
            .await
            .expect("the proxy streams")
            .expect("read");
        assert!(n > 0, "the proxy closed before streaming");
        got.extend_from_slice(&buf[..n]);
    }
    drop(stream);
}

/// Runs `sdk_call.py` and parses its JSON line.
pub async fn sdk(python: &Path, api: &str, base: &str, model: &str, stream: bool) -> Value {
    let script = repo_root().join("tests/support/llm/sdk_call.py");
    let output = tokio::time::timeout(
        GUARD,
        tokio::process::Command::new(python)
            .arg(script)
            .args([
                api,
                base,
                model,
                if stream { "stream" } else { "once" },
                "20",
            ])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the SDK call ends")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "sdk_call.py {api} {base} {model}: {e}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

// ---------------------------------------------------------------------------------------
// The scenario.

/// How the scenario runs patchbay (the binary, or the graph in process).
#[allow(async_fn_in_trait)]
pub trait Patchbay {
    /// Starts patchbay on the config file.
    async fn start(&mut self, config: &Path);
    /// Stops it (SIGTERM or the stop signal) and waits for it to end.
    async fn stop(&mut self);
}

/// One SDK call through the proxy whose signals are checked.
struct Call {
    api: &'static str,
    model: String,
    result: Value,
}

fn pipeline(dir: &Path, ports: [u16; 4], replay: &str, mock: &str, out: &Path) -> PathBuf {
    let [oai, ant, mock_oai, mock_ant] = ports;
    let text = format!(
        r#"
[sources.oai]
type = "openai"
mode = "proxy"
listen = "127.0.0.1:{oai}"
upstream = "{replay}"
health_interval_ms = 500

[sources.ant]
type = "anthropic"
mode = "proxy"
listen = "127.0.0.1:{ant}"
upstream = "{replay}"

[sources.mock_oai]
type = "openai"
mode = "proxy"
listen = "127.0.0.1:{mock_oai}"
upstream = "{mock}"
timeout_ms = 1500

[sources.mock_ant]
type = "anthropic"
mode = "proxy"
listen = "127.0.0.1:{mock_ant}"
upstream = "{mock}/anthropic"
timeout_ms = 1500

[outputs.out]
type = "file"
path = "{}"
inputs = ["oai", "ant", "mock_oai", "mock_ant"]
"#,
        out.display()
    );
    let path = dir.join("llm-proxy.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// The whole scenario: SDK calls direct vs proxied, faults, a hang-up, then the signals.
pub async fn run_scenario(patchbay: impl Patchbay, tag: &str) {
    let python = python();
    let replay = start_replay().await;
    let mock = start_llmock(&python).await;
    let dir = temp_dir(tag);
    // Bound after the directory, so that when a check fails patchbay is dropped (and
    // stopped) before the directory it writes into is removed.
    let mut patchbay = patchbay;
    let out = dir.join("signals.jsonl");
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let config = pipeline(dir.path(), ports, &replay.url, &mock.url, &out);
    patchbay.start(&config).await;
    for port in ports {
        wait_listening(port).await;
    }
    let proxy = |i: usize| format!("http://127.0.0.1:{}", ports[i]);

    // Recorded captures: the SDK gets exactly the same through the proxy.
    let mut calls = Vec::new();
    let cases: [(&'static str, usize, &str, bool); 8] = [
        ("openai", 0, "openai-python-chat-stream-plain-text", true),
        (
            "openai",
            0,
            "openai-python-chat-stream-tool-call-single",
            true,
        ),
        ("openai", 0, "openai-python-chat-stream-finish-length", true),
        ("openai", 0, "whole-openai", false),
        ("anthropic", 1, "py-basic_response", true),
        ("anthropic", 1, "py-tool_use_response", true),
        ("anthropic", 1, "whole-anthropic", false),
        ("openai", 0, "no-such-model", true),
    ];
    for (api, port, model, stream) in cases {
        let direct = sdk(&python, api, &replay.url, model, stream).await;
        let proxied = sdk(&python, api, &proxy(port), model, stream).await;
        assert_eq!(
            proxied, direct,
            "{api} {model}: the proxy changed what the SDK got"
        );
        assert!(
            direct.get("error").is_none() || model == "no-such-model",
            "{api} {model}: {direct}"
        );
        calls.push(Call {
            api,
            model: model.to_owned(),
            result: proxied,
        });
    }
    // API keys passed through to the upstream.
    {
        let keys = replay.seen.keys.lock().expect("lock");
        assert!(
            keys.iter().any(|k| k == "Bearer sk-patchbay-test-key"),
            "{keys:?}"
        );
        // (anthropic 2.x sends it as a bearer token, older SDKs as `x-api-key`)
        assert!(
            keys.iter().any(|k| k.ends_with("sk-ant-patchbay-test-key")),
            "{keys:?}"
        );
    }

    // A client that hangs up mid-stream cancels the upstream request.
    hang_up_mid_stream(ports[0]).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while replay.seen.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upstream stream was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // llmock faults reach the SDK unchanged (same as calling llmock directly).
    let mut faults = Vec::new();
    for (api, port) in [("openai", 2usize), ("anthropic", 3usize)] {
        let faults_of_api: [(&str, Value, bool); 3] = [
            (
                "fault-429",
                json!([{"type": "fail", "status": 429, "message": "slow down", "retry_after": 1}]),
                false,
            ),
            (
                "fault-truncate",
                json!([{"type": "stream_fault", "kind": "truncate", "after_chunks": 2}]),
                true,
            ),
            (
                "fault-disconnect",
                json!([{"type": "stream_fault", "kind": "disconnect", "after_chunks": 2}]),
                true,
            ),
        ];
        // Faults match the generation route only (the proxies' health polls of
        // `/v1/models` must not take them).
        let route = if api == "openai" {
            "*/chat/completions"
        } else {
            "*/messages"
        };
        for (name, mut behaviors, stream) in faults_of_api {
            for b in behaviors.as_array_mut().into_iter().flatten() {
                let mut matcher = json!({"path": route});
                if stream {
                    matcher["stream"] = json!(true);
                }
                b["match"] = matcher;
            }
            let model = format!("{api}-{name}");
            mock.queue(behaviors.clone()).await;
            let direct = sdk(&python, api, &mock.base(api), &model, stream).await;
            mock.queue(behaviors).await;
            let proxied = sdk(&python, api, &proxy(port), &model, stream).await;
            assert_eq!(proxied, direct, "{api} {name}: the proxy changed the fault");
            faults.push((api, model, name, proxied));
        }
        // Latency past the proxy's timeout_ms: a 504 with a JSON error.
        mock.queue(json!([{"type": "delay", "seconds": 3, "match": {"path": route}}]))
            .await;
        let model = format!("{api}-fault-latency");
        let proxied = sdk(&python, api, &proxy(port), &model, false).await;
        assert_eq!(proxied["error"]["status"], 504, "{proxied}");
        // (the openai SDK unwraps the `error` object of the body, anthropic's does not)
        let body = &proxied["error"]["body"];
        assert!(
            body["type"] == "timeout" || body["error"]["type"] == "timeout",
            "{proxied}"
        );
        faults.push((api, model, "fault-latency", proxied));
        // And the proxy keeps serving.
        let model = format!("{api}-after-faults");
        let ok = sdk(&python, api, &proxy(port), &model, true).await;
        assert!(ok.get("error").is_none(), "{api} after the faults: {ok}");
    }

    // Wait until every request has its end (a completion or an error) in the file.
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let signals = read_signals(&out);
        let open: Vec<&Value> = signals
            .iter()
            .filter(|d| d["type"] == "task_dispatch")
            .filter(|d| {
                !signals.iter().any(|s| {
                    s["metadata"]["requestId"] == d["payload"]["taskId"]
                        && (s["type"] == "completion" || s["type"] == "error")
                })
            })
            .collect();
        if open.is_empty() && signals.len() > calls.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "requests without an end: {open:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    patchbay.stop().await;
    let signals = read_signals(&out);
    check_signals(&signals, &calls, &faults);
}

/// The signals of the output file.
pub fn read_signals(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The signals of the request whose `task_dispatch` went to `model`.
fn request_signals<'a>(signals: &'a [Value], model: &str) -> Vec<&'a Value> {
    let dispatch = signals
        .iter()
        .find(|s| s["type"] == "task_dispatch" && s["payload"]["to"] == model)
        .unwrap_or_else(|| panic!("no task_dispatch to {model}"));
    let id = dispatch["payload"]["taskId"].as_str().expect("taskId");
    assert_eq!(dispatch["correlationId"], id);
    assert_eq!(dispatch["metadata"]["requestId"], id);
    assert!(
        dispatch["payload"]["from"]
            .as_str()
            .is_some_and(|f| !f.is_empty())
    );
    assert_eq!(
        dispatch["payload"]["description"], "What is the weather in Paris?",
        "{dispatch}"
    );
    signals
        .iter()
        .filter(|s| s["metadata"]["requestId"] == id)
        .collect()
}

fn check_signals(signals: &[Value], calls: &[Call], faults: &[(&str, String, &str, Value)]) {
    assert!(!signals.is_empty(), "patchbay wrote no signal");
    for s in signals {
        if crate::WELL_KNOWN.contains(&s["type"].as_str().unwrap_or_default()) {
            crate::assert_schema_valid(s);
        }
        // No API key ever reaches a signal.
        let text = s.to_string();
        assert!(!text.contains("patchbay-test-key"), "a key leaked: {text}");
    }
    for call in calls {
        let of = request_signals(signals, &call.model);
        let kinds: Vec<&str> = of.iter().filter_map(|s| s["type"].as_str()).collect();
        if let Some(error) = call.result.get("error") {
            let e = of
                .iter()
                .find(|s| s["type"] == "error")
                .expect("an error signal");
            assert_eq!(e["metadata"]["status"], error["status"], "{e}");
            assert_eq!(e["payload"]["code"], "invalid_request_error");
            continue;
        }
        let text: String = of
            .iter()
            .filter(|s| s["type"] == "text_delta")
            .filter_map(|s| s["payload"]["content"].as_str())
            .collect();
        let tools: Vec<&&Value> = of.iter().filter(|s| s["type"] == "tool_call").collect();
        let completions: Vec<&&Value> = of.iter().filter(|s| s["type"] == "completion").collect();
        let usage = of
            .iter()
            .find(|s| s["type"] == "token_usage")
            .unwrap_or_else(|| panic!("{}: no token_usage in {of:?}", call.model));
        assert_eq!(completions.len(), 1, "{}: {kinds:?}", call.model);
        assert!(!kinds.contains(&"error"), "{}: {kinds:?}", call.model);
        let r = &call.result;
        if call.api == "openai" {
            let choice = &r["choices"][0];
            assert_eq!(
                text,
                choice["text"].as_str().unwrap_or_default(),
                "{}",
                call.model
            );
            assert_eq!(completions[0]["payload"]["result"], choice["finish"]);
            let sdk_tools = choice["tool_calls"].as_array().expect("tool_calls");
            assert_eq!(tools.len(), sdk_tools.len(), "{}", call.model);
            for (signal, sdk) in tools.iter().zip(sdk_tools) {
                assert_eq!(signal["payload"]["toolName"], sdk["name"]);
                assert_eq!(signal["payload"]["callId"], sdk["id"]);
                let args: Value =
                    serde_json::from_str(sdk["arguments"].as_str().unwrap_or("{}")).expect("args");
                assert_eq!(signal["payload"]["input"], args);
            }
            assert_eq!(
                usage["payload"]["promptTokens"],
                r["usage"]["prompt_tokens"]
            );
            assert_eq!(
                usage["payload"]["completionTokens"],
                r["usage"]["completion_tokens"]
            );
        } else {
            assert_eq!(
                text,
                r["text"].as_str().unwrap_or_default(),
                "{}",
                call.model
            );
            assert_eq!(completions[0]["payload"]["result"], r["finish"]);
            let sdk_tools = r["tool_calls"].as_array().expect("tool_calls");
            assert_eq!(tools.len(), sdk_tools.len(), "{}", call.model);
            for (signal, sdk) in tools.iter().zip(sdk_tools) {
                assert_eq!(signal["payload"]["toolName"], sdk["name"]);
                assert_eq!(signal["payload"]["callId"], sdk["id"]);
                assert_eq!(signal["payload"]["input"], sdk["input"]);
            }
            assert_eq!(usage["payload"]["promptTokens"], r["usage"]["input_tokens"]);
            assert_eq!(
                usage["payload"]["completionTokens"],
                r["usage"]["output_tokens"]
            );
        }
    }
    // The hang-up.
    let cancelled = signals
        .iter()
        .find(|s| s["type"] == "error" && s["payload"]["code"] == "client_cancelled")
        .expect("a client_cancelled error");
    assert_eq!(cancelled["payload"]["severity"], "warning");
    // Every fault became an error signal of its request.
    let mut codes = BTreeMap::new();
    for (api, model, name, _) in faults {
        let of = request_signals(signals, model);
        let errors: Vec<String> = of
            .iter()
            .filter(|s| s["type"] == "error")
            .map(|s| s["payload"]["code"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert!(!errors.is_empty(), "{model}: no error signal");
        codes.insert(format!("{api}-{name}"), errors);
    }
    for api in ["openai", "anthropic"] {
        let latency = &codes[&format!("{api}-fault-latency")];
        assert_eq!(latency, &["upstream_timeout"], "{codes:?}");
        let truncated = &codes[&format!("{api}-fault-truncate")];
        assert!(
            truncated.iter().any(|c| c == "truncated_stream"),
            "{codes:?}"
        );
    }
}
