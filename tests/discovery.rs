//! Discovery against stand-ins for Ollama and LM Studio on their real ports (11434, 1234),
//! answering with recorded bodies (`tests/fixtures/ollama`, `tests/fixtures/lmstudio`).
//!
//! One test function: the ports are the real ones, so the phases cannot run in parallel.
//! If a port is taken by something else (a real Ollama), the test fails and says so.
//! The other tests compile `[discovery]` and `discovery` sources, probing nothing.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use patchbay::discovery::{Probe, ProbeContext, Service, ServiceState, discover, render_table};
use patchbay_graph::probe::Offers;
use patchbay_graph::{Diagnostic, Graph, Port, SourceText};
use patchbay_testkit::process::Killed;
use patchbay_testkit::scratch::ScratchDir;

const OLLAMA: &str = "127.0.0.1:11434";
const LMSTUDIO: &str = "127.0.0.1:1234";

fn fixture(path: &str) -> Vec<u8> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    std::fs::read(&full).unwrap_or_else(|e| panic!("fixture {}: {e}", full.display()))
}

/// How a stand-in frames its bodies.
#[derive(Clone, Copy)]
enum Framing {
    Length,
    Chunked,
}

/// A stand-in HTTP server: `routes` maps a path to a body (200); anything else is a 404.
struct StandIn {
    addr: &'static str,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StandIn {
    fn start(
        addr: &'static str,
        routes: Vec<(&'static str, Vec<u8>)>,
        framing: Framing,
    ) -> StandIn {
        let listener = match TcpListener::bind(addr) {
            Ok(listener) => listener,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => panic!(
                "{addr} is taken by something else (a real Ollama or LM Studio?): stop it to \
                 run this test"
            ),
            Err(e) => panic!("cannot listen on {addr}: {e}"),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    answer(stream, &routes, framing);
                }
            }
        });
        StandIn {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops listening: the port is closed when this returns.
    fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag and drops the listener.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn answer(mut stream: TcpStream, routes: &[(&str, Vec<u8>)], framing: Framing) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("");
    let (status, body) = match routes.iter().find(|(p, _)| *p == path) {
        Some((_, body)) => ("200 OK", body.clone()),
        None => ("404 Not Found", b"404 page not found".to_vec()),
    };
    let mut response =
        format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\n").into_bytes();
    match framing {
        Framing::Length => {
            response.extend(format!("Content-Length: {}\r\n\r\n", body.len()).bytes());
            response.extend(&body);
        }
        Framing::Chunked => {
            response.extend(b"Transfer-Encoding: chunked\r\n\r\n");
            for chunk in body.chunks(16) {
                response.extend(format!("{:x}\r\n", chunk.len()).bytes());
                response.extend(chunk);
                response.extend(b"\r\n");
            }
            response.extend(b"0\r\n\r\n");
        }
    }
    let _ = stream.write_all(&response);
}

/// A port nothing listens on (for the OpenClaw probe, which is not under test here).
fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    addr
}

/// Every probe of the build, but the OpenClaw gateway's on a closed port and a MIDI system
/// that lists one controller (the real one is tested in the MIDI adapter).
fn test_probes() -> Vec<(Probe, ProbeContext)> {
    let fake_midi = Probe {
        service: "midi",
        rescan: None,
        run: |_| {
            Box::pin(async {
                Some(Service {
                    inputs: vec!["ctl:pad".to_owned()],
                    ..Service::new("midi", Offers::Ports, "jack", ServiceState::Available)
                })
            })
        },
    };
    let mut probes: Vec<(Probe, ProbeContext)> = patchbay::probes()
        .into_iter()
        .filter(|p| p.service != "midi")
        .map(|p| {
            let mut cx = ProbeContext::default();
            if p.service == "openclaw" {
                cx.address = Some(closed_port());
            }
            (p, cx)
        })
        .collect();
    probes.push((fake_midi, ProbeContext::default()));
    probes
}

fn run_discovery(config: &[(Probe, ProbeContext)]) -> Vec<Service> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(discover(config))
}

fn find<'a>(services: &'a [Service], name: &str) -> &'a Service {
    services
        .iter()
        .find(|s| s.service == name)
        .unwrap_or_else(|| panic!("no {name} in {services:?}"))
}

#[test]
fn discovery_finds_ollama_and_lmstudio_and_notices_them_leave_and_return() {
    let config = test_probes();
    let ollama_routes = || {
        vec![
            ("/v1/models", fixture("ollama/v1-models.test-expected.json")),
            ("/api/tags", fixture("ollama/api-tags.docs-example.json")),
        ]
    };
    let lmstudio_routes = || {
        vec![(
            "/v1/models",
            fixture("lmstudio/v1-models.third-party-observed.json"),
        )]
    };

    // Both answer: both are found, with their models.
    let ollama = StandIn::start(OLLAMA, ollama_routes(), Framing::Length);
    let lmstudio = StandIn::start(LMSTUDIO, lmstudio_routes(), Framing::Chunked);
    let services = run_discovery(&config);
    let table = render_table(&services);
    let found = find(&services, "ollama");
    assert_eq!(found.state, ServiceState::Available, "{table}");
    assert_eq!(found.address, "http://127.0.0.1:11434");
    assert_eq!(found.models, ["test-model"]);
    let found = find(&services, "lmstudio");
    assert_eq!(found.state, ServiceState::Available, "{table}");
    assert_eq!(found.models, ["text-embedding-nomic-embed-text-v1.5"]);
    assert_eq!(find(&services, "openclaw").state, ServiceState::Unavailable);
    // Whether `claude`, `codex` or `gemini` is on this machine's PATH varies; that they
    // are probed does not.
    for agent in ["claude-code", "codex", "gemini-cli"] {
        assert_eq!(find(&services, agent).service, agent);
    }
    let midi = find(&services, "midi");
    assert_eq!(
        (midi.address.as_str(), midi.inputs.as_slice()),
        ("jack", &["ctl:pad".to_owned()][..])
    );
    assert!(
        table.contains("ollama       http://127.0.0.1:11434  available    test-model"),
        "{table}"
    );

    // LM Studio stops: unavailable; Ollama is still there.
    lmstudio.stop();
    let services = run_discovery(&config);
    let gone = find(&services, "lmstudio");
    assert_eq!(gone.state, ServiceState::Unavailable, "{services:?}");
    assert_eq!(gone.detail.as_deref(), Some("connection refused"));
    assert!(gone.models.is_empty());
    assert!(find(&services, "ollama").is_available());

    // It starts again: available again.
    let lmstudio = StandIn::start(LMSTUDIO, lmstudio_routes(), Framing::Chunked);
    let services = run_discovery(&config);
    assert!(find(&services, "lmstudio").is_available(), "{services:?}");

    // Ollama without /v1/models (an old version): the models come from /api/tags.
    ollama.stop();
    let ollama = StandIn::start(
        OLLAMA,
        vec![("/api/tags", fixture("ollama/api-tags.docs-example.json"))],
        Framing::Chunked,
    );
    let services = run_discovery(&config);
    let found = find(&services, "ollama");
    assert!(found.is_available(), "{services:?}");
    assert_eq!(found.models, ["deepseek-r1:latest", "llama3.2:latest"]);
    assert!(found.detail.as_deref().unwrap_or("").contains("/api/tags"));

    // Ollama with no model pulled (`"data": null`): available, no models.
    ollama.stop();
    let ollama = StandIn::start(
        OLLAMA,
        vec![(
            "/v1/models",
            fixture("ollama/v1-models-empty.test-expected.json"),
        )],
        Framing::Length,
    );
    let services = run_discovery(&config);
    let found = find(&services, "ollama");
    assert!(found.is_available(), "{services:?}");
    assert!(found.models.is_empty());
    assert!(render_table(&services).contains("available    no models"));

    // Both gone.
    ollama.stop();
    lmstudio.stop();
    let services = run_discovery(&config);
    assert_eq!(find(&services, "ollama").state, ServiceState::Unavailable);
    assert_eq!(find(&services, "lmstudio").state, ServiceState::Unavailable);
    let json = serde_json::to_value(&services).unwrap();
    assert_eq!(json[0]["service"], "ollama");
    assert_eq!(json[0]["state"], "unavailable");

    // The binary: `patchbay discover --json` finds Ollama.
    let ollama = StandIn::start(OLLAMA, ollama_routes(), Framing::Length);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["discover", "--json"])
        .output()
        .expect("patchbay discover runs");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json[0]["service"], "ollama");
    assert_eq!(json[0]["state"], "available", "{json}");
    assert_eq!(json[0]["models"][0], "test-model");

    // The daemon's [discovery]: `local:ollama` says `discovery.found`, `discovery.lost`
    // when it stops, and `discovery.found` again when it returns.
    let dir = ScratchDir::new("discovery");
    let out_path = dir.join("found.jsonl");
    let config_path = dir.join("discovery.toml");
    std::fs::write(
        &config_path,
        format!(
            "[discovery]\nenabled = true\ninterval_ms = 100\nconnect = [\"out\"]\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"local:ollama\"]\npath = \"{}\"\n",
            out_path.display()
        ),
    )
    .unwrap();
    let mut daemon = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["run", config_path.to_str().unwrap()])
            .env("PATCHBAY_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("patchbay runs"),
    );
    let wait_for = |kinds: &[&str]| {
        let start = std::time::Instant::now();
        loop {
            let seen: Vec<String> = std::fs::read_to_string(&out_path)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|s| s["payload"]["service"] == "ollama")
                .map(|s| s["type"].as_str().unwrap_or_default().to_owned())
                .collect();
            if seen == kinds {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "expected {kinds:?}, saw {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(&["discovery.found"]);
    ollama.stop();
    wait_for(&["discovery.found", "discovery.lost"]);
    let ollama = StandIn::start(OLLAMA, ollama_routes(), Framing::Length);
    wait_for(&["discovery.found", "discovery.lost", "discovery.found"]);
    ollama.stop();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &daemon.0.id().to_string()])
        .status();
    assert!(daemon.0.wait().unwrap().success());
}

/// Compiles `(path, text)` files with patchbay's registry.
fn compile(files: &[(&str, &str)]) -> Result<Graph, Vec<Diagnostic>> {
    let files: Vec<SourceText> = files
        .iter()
        .map(|(path, text)| SourceText::new(*path, *text))
        .collect();
    patchbay_graph::compile::compile_with_env(&files, &patchbay::registry(), &|_| None)
}

/// Every node as `name (type) @location <- inputs` (an input as its node's name).
fn shape(graph: &Graph) -> Vec<String> {
    graph
        .nodes
        .iter()
        .map(|n| {
            let inputs: Vec<String> = n
                .inputs
                .iter()
                .map(|e| match e.port {
                    Port::Main => graph.nodes[e.from].name.clone(),
                    Port::Dropped => format!("{}.dropped", graph.nodes[e.from].name),
                    Port::Named(i) => format!("{}.<{i}>", graph.nodes[e.from].name),
                })
                .collect();
            format!(
                "{} ({}) @{} <- {}",
                n.name,
                n.type_name,
                n.location,
                inputs.join(", ")
            )
        })
        .collect()
}

#[test]
fn the_default_pipeline_compiles_to_the_graph_it_always_had() {
    // The nodes, their order, locations and edges as they were when `[discovery]` built
    // its sources by a path of its own.
    let graph = compile(&[("<default pipeline>", patchbay::DEFAULT_PIPELINE)]).unwrap();
    // Claude Code's and Gemini CLI's hook endpoints joined later (`claude` and `gemini`,
    // feeding both outputs); the
    // discovery sources come from the probes of every adapter, `claude-code` included.
    let feeds = "ui.inbound, stdin, claude.inbound, gemini.inbound, local:ollama, local:lmstudio, local:openclaw, local:claude-code, local:codex, local:gemini-cli, local:opencode, local:midi";
    assert_eq!(
        shape(&graph),
        [
            "stdin (stdin) @<default pipeline>:2:10 <- ".to_owned(),
            "local:ollama (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:lmstudio (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:openclaw (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:claude-code (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:codex (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:gemini-cli (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:opencode (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "local:midi (discovery) @<default pipeline>:32:2 <- ".to_owned(),
            "ui.inbound (inbound) @<default pipeline>:5:10 <- ".to_owned(),
            "claude.inbound (inbound) @<default pipeline>:19:10 <- ".to_owned(),
            "gemini.inbound (inbound) @<default pipeline>:24:10 <- ".to_owned(),
            format!("ui (sidecar) @<default pipeline>:5:10 <- {feeds}"),
            format!("log (stdout) @<default pipeline>:10:10 <- {feeds}"),
            "claude (claude_code) @<default pipeline>:19:10 <- ui.inbound".to_owned(),
            "gemini (gemini_cli) @<default pipeline>:24:10 <- ui.inbound".to_owned(),
        ]
    );
}

#[test]
fn a_discovery_source_written_by_hand_is_what_discovery_declares() {
    let expanded = "[sources.s]\ntype = \"stdin\"\n[outputs.o]\ntype = \"stdout\"\ninputs = [\"s\"]\n[discovery]\nenabled = true\ninterval_ms = 100\nconnect = [\"o\"]\n";
    let mut written = String::from("[sources.s]\ntype = \"stdin\"\n");
    for service in [
        "ollama",
        "lmstudio",
        "openclaw",
        "claude-code",
        "codex",
        "gemini-cli",
        "opencode",
        "midi",
    ] {
        written += &format!(
            "[sources.\"local:{service}\"]\ntype = \"discovery\"\nservice = \"{service}\"\ninterval_ms = 100\n"
        );
    }
    written += "[outputs.o]\ntype = \"stdout\"\ninputs = [\"s\", \"local:ollama\", \"local:lmstudio\", \"local:openclaw\", \"local:claude-code\", \"local:codex\", \"local:gemini-cli\", \"local:opencode\", \"local:midi\"]\n";
    let without_locations = |graph: &Graph| -> Vec<String> {
        shape(graph)
            .into_iter()
            .map(|line| {
                let (head, tail) = line.split_once(" @").unwrap();
                format!("{head} <-{}", tail.split_once(" <-").unwrap().1)
            })
            .collect()
    };
    let expanded = compile(&[("p.toml", expanded)]).unwrap();
    let written = compile(&[("p.toml", &written)]).unwrap();
    assert_eq!(without_locations(&expanded), without_locations(&written));
    assert_eq!(written.nodes[1].type_name, "discovery");

    // Any name will do, and `interval_ms` has its default.
    let graph = compile(&[(
        "p.toml",
        "[sources.ollama]\ntype = \"discovery\"\nservice = \"ollama\"\n[outputs.o]\ntype = \"stdout\"\ninputs = [\"ollama\"]\n",
    )])
    .unwrap();
    assert_eq!(shape(&graph)[0], "ollama (discovery) @p.toml:1:10 <- ");
}

#[test]
fn discovery_refuses_an_unknown_service_and_a_second_table_with_their_places() {
    let errors = |files: &[(&str, &str)]| -> Vec<String> {
        compile(files)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect()
    };
    assert_eq!(
        errors(&[(
            "p.toml",
            "[sources.x]\ntype = \"discovery\"\nservice = \"olama\"\n",
        )]),
        [
            "p.toml:3:11: x: unknown service `olama` (did you mean `ollama`?); known: ollama, lmstudio, openclaw, claude-code, codex, gemini-cli, opencode, midi"
        ]
    );
    assert_eq!(
        errors(&[(
            "p.toml",
            "[sources.x]\ntype = \"discovery\"\nservice = \"ollama\"\ninterval_ms = 0\n",
        )]),
        ["p.toml:4:15: x: `interval_ms` must be at least 1"]
    );
    assert_eq!(
        errors(&[
            ("a.toml", "[discovery]\nenabled = true\n"),
            ("b.toml", "[discovery]\nenabled = true\n"),
        ]),
        ["a.toml:1:2: [discovery] is declared twice (also at b.toml:1:2)"]
    );
    assert_eq!(
        errors(&[(
            "p.toml",
            "[sources.\"local:openclaw\"]\ntype = \"stdin\"\n\n[discovery]\nenabled = true\n",
        )]),
        ["p.toml:4:2: discovery: `local:openclaw` is already declared"]
    );
}

#[test]
fn graph_draws_the_discovered_sources() {
    let dir = ScratchDir::new("discovery-graph");
    let path = dir.join("p.toml");
    std::fs::write(
        &path,
        "[discovery]\nenabled = true\nconnect = [\"o\"]\n[outputs.o]\ntype = \"stdout\"\ninputs = [\"local:*\"]\n",
    )
    .unwrap();
    for format in ["dot", "mermaid"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["graph", path.to_str().unwrap(), "--format", format])
            .output()
            .expect("patchbay runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{format}: {text}");
        for service in [
            "ollama",
            "lmstudio",
            "openclaw",
            "claude-code",
            "codex",
            "gemini-cli",
            "opencode",
            "midi",
        ] {
            assert!(
                text.contains(&format!("local:{service}")),
                "{format}: {text}"
            );
        }
    }
}
