//! Local service discovery: what runs on this machine that patchbay can connect to.
//!
//! [`discover`] probes, in parallel and each within [`DiscoveryConfig::timeout`] (300 ms by
//! default):
//!
//! - **Ollama**: `GET http://127.0.0.1:11434/v1/models`, then `/api/tags` if that fails;
//! - **LM Studio**: `GET http://127.0.0.1:1234/v1/models`;
//! - an **OpenClaw gateway**: a TCP connect to `127.0.0.1:18789`, and whether a token is in
//!   `~/.openclaw/openclaw.json` (`gateway.auth.token`; the token itself is never read
//!   into the result);
//! - the **MIDI ports**, through a [`MidiLister`] the caller provides (so this crate does not
//!   depend on a MIDI backend).
//!
//! The HTTP probes use the client every transport shares (`patchbay_http`), without
//! proxies: these addresses are loopback. Model lists are normalized by
//! `patchbay_openai::model_ids` (OpenAI, Ollama with `"data": null`, LM Studio without
//! `created`, Ollama's `/api/tags`). The result prints as a table ([`render_table`]) or as
//! JSON (`serde_json::to_string(&services)`).

mod daemon;

pub use daemon::{DiscoveredSource, DiscoverySourceOptions, register};

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// The default probe timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(300);

/// The MIDI ports a [`MidiLister`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MidiListing {
    /// The MIDI system (`alsa`, `jack`): shown as the address.
    pub system: String,
    /// Input ports (controllers' outputs).
    pub inputs: Vec<String>,
    /// Output ports (controllers' inputs).
    pub outputs: Vec<String>,
}

/// Lists the MIDI ports, or says why there is no MIDI system. Called on a blocking thread.
/// The CLI passes:
///
/// ```ignore
/// Arc::new(|| {
///     patchbay_midi::list_ports()
///         .map(|p| MidiListing { system: p.backend.into(), inputs: p.inputs, outputs: p.outputs })
///         .map_err(|e| e.to_string())
/// })
/// ```
pub type MidiLister = Arc<dyn Fn() -> Result<MidiListing, String> + Send + Sync>;

/// What to probe, and where.
#[derive(Clone)]
pub struct DiscoveryConfig {
    /// The time each probe may take.
    pub timeout: Duration,
    /// Ollama's address (`host:port`).
    pub ollama: String,
    /// LM Studio's address.
    pub lmstudio: String,
    /// The OpenClaw gateway's address.
    pub openclaw: String,
    /// The OpenClaw config file to look for a token in (`None`: do not look).
    pub openclaw_config: Option<PathBuf>,
    /// How to list MIDI ports (`None`: MIDI is not probed).
    pub midi: Option<MidiLister>,
}

impl std::fmt::Debug for DiscoveryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryConfig")
            .field("timeout", &self.timeout)
            .field("ollama", &self.ollama)
            .field("lmstudio", &self.lmstudio)
            .field("openclaw", &self.openclaw)
            .field("openclaw_config", &self.openclaw_config)
            .field("midi", &self.midi.is_some())
            .finish()
    }
}

impl Default for DiscoveryConfig {
    /// The well-known local addresses, `~/.openclaw/openclaw.json`, no MIDI.
    fn default() -> Self {
        DiscoveryConfig {
            timeout: DEFAULT_TIMEOUT,
            ollama: "127.0.0.1:11434".to_owned(),
            lmstudio: "127.0.0.1:1234".to_owned(),
            openclaw: "127.0.0.1:18789".to_owned(),
            openclaw_config: default_openclaw_config(),
            midi: None,
        }
    }
}

impl DiscoveryConfig {
    /// The defaults, with MIDI listed by `midi`.
    pub fn with_midi(midi: MidiLister) -> Self {
        DiscoveryConfig {
            midi: Some(midi),
            ..DiscoveryConfig::default()
        }
    }
}

/// `~/.openclaw/openclaw.json`, if there is a home directory.
pub fn default_openclaw_config() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".openclaw").join("openclaw.json"))
}

/// The kind of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceKind {
    /// Ollama.
    Ollama,
    /// LM Studio.
    Lmstudio,
    /// An OpenClaw gateway.
    Openclaw,
    /// The MIDI system.
    Midi,
}

impl ServiceKind {
    /// The name shown in the table (and used for `local:<service>` sources).
    pub fn name(self) -> &'static str {
        match self {
            ServiceKind::Ollama => "ollama",
            ServiceKind::Lmstudio => "lmstudio",
            ServiceKind::Openclaw => "openclaw",
            ServiceKind::Midi => "midi",
        }
    }
}

/// Whether a service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    /// It answered as expected.
    Available,
    /// Nothing there (refused, timed out, no MIDI system).
    Unavailable,
    /// Something answered, but not as expected (an HTTP error, a body that is not a model
    /// list).
    Error,
}

impl ServiceState {
    fn as_str(self) -> &'static str {
        match self {
            ServiceState::Available => "available",
            ServiceState::Unavailable => "unavailable",
            ServiceState::Error => "error",
        }
    }
}

/// One probed service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    /// Which service.
    pub service: ServiceKind,
    /// Where it was probed (`http://127.0.0.1:11434`, `127.0.0.1:18789`; for MIDI the
    /// system, `alsa` or `jack`, or `midi` when there is none).
    pub address: String,
    /// Whether it answered.
    pub state: ServiceState,
    /// Why it is unavailable or in error, or a remark (which endpoint answered, the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Model ids (Ollama, LM Studio).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// MIDI input ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// MIDI output ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// OpenClaw: whether a gateway token was found in the config file (never the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_found: Option<bool>,
}

impl Service {
    fn new(service: ServiceKind, address: String, state: ServiceState) -> Self {
        Service {
            service,
            address,
            state,
            detail: None,
            models: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            token_found: None,
        }
    }

    fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Whether it answered as expected.
    pub fn is_available(&self) -> bool {
        self.state == ServiceState::Available
    }
}

/// Probes every service in parallel; the result is in a fixed order (Ollama, LM Studio,
/// OpenClaw, MIDI), one entry per service whatever its state.
pub async fn discover(config: &DiscoveryConfig) -> Vec<Service> {
    let (ollama, lmstudio, openclaw, midi) = tokio::join!(
        probe_ollama(&config.ollama, config.timeout),
        probe_openai_models(ServiceKind::Lmstudio, &config.lmstudio, config.timeout),
        probe_openclaw(
            &config.openclaw,
            config.openclaw_config.clone(),
            config.timeout
        ),
        probe_midi(config.midi.clone(), config.timeout),
    );
    let mut services = vec![ollama, lmstudio, openclaw];
    services.extend(midi);
    services
}

/// Ollama: `/v1/models`, then `/api/tags` when that does not give a model list.
pub async fn probe_ollama(addr: &str, timeout: Duration) -> Service {
    let first = probe_openai_models(ServiceKind::Ollama, addr, timeout).await;
    if first.state != ServiceState::Error {
        return first;
    }
    let tags = probe_models(ServiceKind::Ollama, addr, "/api/tags", timeout).await;
    if tags.is_available() {
        return tags.with_detail(format!(
            "/v1/models failed ({}); models from /api/tags",
            first.detail.as_deref().unwrap_or("error")
        ));
    }
    first
}

/// A server with an OpenAI-compatible `GET /v1/models`.
pub async fn probe_openai_models(kind: ServiceKind, addr: &str, timeout: Duration) -> Service {
    probe_models(kind, addr, "/v1/models", timeout).await
}

async fn probe_models(kind: ServiceKind, addr: &str, path: &str, timeout: Duration) -> Service {
    let address = format!("http://{addr}");
    match get(&address, path, timeout).await {
        Ok((status, body)) if status.is_success() => match patchbay_openai::model_ids(&body) {
            Ok(models) => Service {
                models,
                ..Service::new(kind, address, ServiceState::Available)
            },
            Err(err) => Service::new(kind, address, ServiceState::Error)
                .with_detail(format!("GET {path}: {err}")),
        },
        Ok((status, _)) => Service::new(kind, address, ServiceState::Error)
            .with_detail(format!("GET {path}: HTTP {}", status.as_u16())),
        Err(ProbeError::Unreachable(reason)) => {
            Service::new(kind, address, ServiceState::Unavailable).with_detail(reason)
        }
        Err(ProbeError::BadAnswer(reason)) => Service::new(kind, address, ServiceState::Error)
            .with_detail(format!("GET {path}: {reason}")),
    }
}

/// The largest model list accepted (they are a few kB).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Why an HTTP probe got no usable answer.
#[derive(Debug)]
enum ProbeError {
    /// Nothing answers there (refused, timed out, reset): the service is not running.
    Unreachable(String),
    /// Something answered, but not HTTP, or too much.
    BadAnswer(String),
}

/// `GET {base}{path}`, all of it (connect, send, read the body) within `timeout`.
async fn get(
    base: &str,
    path: &str,
    timeout: Duration,
) -> Result<(reqwest::StatusCode, Vec<u8>), ProbeError> {
    let client = probe_client().map_err(|e| ProbeError::BadAnswer(e.clone()))?;
    let exchange = async {
        let mut response = client
            .get(format!("{base}{path}"))
            .header("accept", "application/json")
            .send()
            .await?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_BODY {
                return Ok(Err(format!("the body is larger than {MAX_BODY} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Ok((status, body)))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(ProbeError::Unreachable(format!(
            "no answer within {} ms",
            timeout.as_millis()
        ))),
        Ok(Ok(Ok(answer))) => Ok(answer),
        Ok(Ok(Err(too_large))) => Err(ProbeError::BadAnswer(too_large)),
        Ok(Err(err)) => Err(classify(&err)),
    }
}

/// Sorts a reqwest error: a refused or failed connection means nobody is there; anything
/// after the connection (a response that is not HTTP) means something else answered.
fn classify(err: &reqwest::Error) -> ProbeError {
    let io_kind = std::iter::successors(Some(err as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .find_map(|e| e.downcast_ref::<std::io::Error>())
    .map(std::io::Error::kind);
    match io_kind {
        Some(std::io::ErrorKind::ConnectionRefused) => {
            ProbeError::Unreachable("connection refused".to_owned())
        }
        Some(kind) if err.is_connect() => ProbeError::Unreachable(kind.to_string()),
        _ if err.is_connect() => ProbeError::Unreachable(error_chain(err)),
        _ => ProbeError::BadAnswer(error_chain(err)),
    }
}

/// An error and its causes, `a: b: c`.
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The probes' client, built once: no proxies (loopback addresses), no redirects, no
/// connection pool.
fn probe_client() -> Result<&'static reqwest::Client, &'static String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            patchbay_http::client_builder()
                .no_proxy()
                // Every probe opens a connection of its own: a pooled one could outlive the
                // service it was made to.
                .pool_max_idle_per_host(0)
                .redirect(reqwest::redirect::Policy::none())
                .user_agent("patchbay-discovery")
                .build()
                .map_err(|e| format!("cannot build an HTTP client: {e}"))
        })
        .as_ref()
}

/// An OpenClaw gateway: a TCP connect, and whether the config file has a token.
pub async fn probe_openclaw(addr: &str, config: Option<PathBuf>, timeout: Duration) -> Service {
    let connect = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await;
    let mut service = match connect {
        Ok(Ok(_stream)) => Service::new(
            ServiceKind::Openclaw,
            addr.to_owned(),
            ServiceState::Available,
        ),
        Ok(Err(err)) => {
            let reason = if err.kind() == std::io::ErrorKind::ConnectionRefused {
                "connection refused".to_owned()
            } else {
                err.to_string()
            };
            Service::new(
                ServiceKind::Openclaw,
                addr.to_owned(),
                ServiceState::Unavailable,
            )
            .with_detail(reason)
        }
        Err(_) => Service::new(
            ServiceKind::Openclaw,
            addr.to_owned(),
            ServiceState::Unavailable,
        )
        .with_detail(format!("no answer within {} ms", timeout.as_millis())),
    };
    if let Some(path) = config {
        let (found, remark) = openclaw_token_status(&path);
        service.token_found = Some(found);
        service.detail = Some(match service.detail.take() {
            Some(reason) => format!("{reason}; {remark}"),
            None => remark,
        });
    }
    service
}

/// Whether `path` holds a gateway token (`gateway.auth.token`, a non-empty string), and a
/// remark for the table. The token is never returned.
pub fn openclaw_token_status(path: &std::path::Path) -> (bool, String) {
    let shown = display_home(path);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return (false, format!("no {shown}"));
        }
        Err(err) => return (false, format!("cannot read {shown}: {err}")),
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(err) => {
            return (false, format!("{shown} is not JSON (line {})", err.line()));
        }
    };
    let found = value
        .pointer("/gateway/auth/token")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|token| !token.trim().is_empty());
    if found {
        (true, format!("token found in {shown}"))
    } else {
        (false, format!("no gateway.auth.token in {shown}"))
    }
}

/// `path` with the home directory shown as `~`.
fn display_home(path: &std::path::Path) -> String {
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty())
        && let Ok(rest) = path.strip_prefix(&home)
    {
        return format!("~/{}", rest.display());
    }
    path.display().to_string()
}

/// The MIDI ports, listed on a blocking thread within the timeout.
pub async fn probe_midi(lister: Option<MidiLister>, timeout: Duration) -> Option<Service> {
    let lister = lister?;
    let address = "midi".to_owned();
    let listing =
        tokio::time::timeout(timeout, tokio::task::spawn_blocking(move || lister())).await;
    Some(match listing {
        Ok(Ok(Ok(listing))) => Service {
            inputs: listing.inputs,
            outputs: listing.outputs,
            ..Service::new(ServiceKind::Midi, listing.system, ServiceState::Available)
        },
        Ok(Ok(Err(reason))) => {
            Service::new(ServiceKind::Midi, address, ServiceState::Unavailable).with_detail(reason)
        }
        Ok(Err(err)) => Service::new(ServiceKind::Midi, address, ServiceState::Error)
            .with_detail(format!("listing MIDI ports failed: {err}")),
        Err(_) => Service::new(ServiceKind::Midi, address, ServiceState::Unavailable)
            .with_detail(format!("no answer within {} ms", timeout.as_millis())),
    })
}

/// The `[discovery]` table of a pipeline (the daemon's periodic discovery).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySettings {
    /// Whether the daemon discovers local services (the default pipeline turns it on).
    #[serde(default)]
    pub enabled: bool,
    /// How often to probe again, ms.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// The outputs the `local:<service>` sources made for what is found feed.
    #[serde(default)]
    pub connect: Vec<String>,
}

/// The default `interval_ms`.
pub const DEFAULT_INTERVAL_MS: u64 = 30_000;

fn default_interval_ms() -> u64 {
    DEFAULT_INTERVAL_MS
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        DiscoverySettings {
            enabled: false,
            interval_ms: DEFAULT_INTERVAL_MS,
            connect: Vec::new(),
        }
    }
}

/// How a service changed between two discoveries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It is available now and was not (or was not probed) before.
    Appeared(Service),
    /// It was available and is not any more (the service says why).
    Vanished(Service),
    /// Still available, with other models or ports.
    Updated(Service),
}

/// What changed from `previous` to `current` (matched by service kind and address), for a
/// daemon that creates sources for what appears and marks what vanished unavailable.
pub fn changes(previous: &[Service], current: &[Service]) -> Vec<Change> {
    let same = |a: &Service, b: &Service| a.service == b.service && a.address == b.address;
    let mut out = Vec::new();
    for now in current {
        let before = previous.iter().find(|p| same(p, now));
        match (before.map(Service::is_available), now.is_available()) {
            (Some(true), true) => {
                let before = before.filter(|b| {
                    b.models != now.models || b.inputs != now.inputs || b.outputs != now.outputs
                });
                if before.is_some() {
                    out.push(Change::Updated(now.clone()));
                }
            }
            (Some(true), false) => out.push(Change::Vanished(now.clone())),
            (Some(false) | None, true) => out.push(Change::Appeared(now.clone())),
            (Some(false) | None, false) => {}
        }
    }
    for before in previous.iter().filter(|p| p.is_available()) {
        if !current.iter().any(|c| same(c, before)) {
            out.push(Change::Vanished(
                Service::new(
                    before.service,
                    before.address.clone(),
                    ServiceState::Unavailable,
                )
                .with_detail("no longer probed"),
            ));
        }
    }
    out
}

/// Discovers every `interval` until `stop` resolves, calling `on_update` with each result
/// and what changed since the previous one (the first call lists what is available as
/// appeared). For the daemon's `[discovery]`.
pub async fn watch(
    config: &DiscoveryConfig,
    interval: Duration,
    stop: impl std::future::Future<Output = ()>,
    mut on_update: impl FnMut(&[Service], &[Change]),
) {
    let mut previous: Vec<Service> = Vec::new();
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {
                let current = discover(config).await;
                let changed = changes(&previous, &current);
                on_update(&current, &changed);
                previous = current;
            }
        }
    }
}

/// The table `patchbay discover` prints: service, address, state, then the models, the
/// ports, or why not.
pub fn render_table(services: &[Service]) -> String {
    let rows: Vec<[String; 4]> = services
        .iter()
        .map(|s| {
            [
                s.service.name().to_owned(),
                s.address.clone(),
                s.state.as_str().to_owned(),
                what(s),
            ]
        })
        .collect();
    let headers = ["SERVICE", "ADDRESS", "STATE", "MODELS / PORTS"];
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()).take(3) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 4]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate().take(3) {
            let width = widths.get(i).copied().unwrap_or(0);
            let _ = write!(text, "{cell:<width$}  ");
        }
        text.push_str(cells[3]);
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(headers);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
    out
}

/// The last column of a row.
fn what(service: &Service) -> String {
    let mut parts = Vec::new();
    match service.service {
        ServiceKind::Ollama | ServiceKind::Lmstudio if service.is_available() => {
            parts.push(if service.models.is_empty() {
                "no models".to_owned()
            } else {
                service.models.join(", ")
            });
        }
        ServiceKind::Midi if service.is_available() => {
            let list = |names: &[String]| {
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            };
            parts.push(format!(
                "in: {}; out: {}",
                list(&service.inputs),
                list(&service.outputs)
            ));
        }
        _ => {}
    }
    if let Some(detail) = &service.detail {
        parts.push(if parts.is_empty() {
            detail.clone()
        } else {
            format!("({detail})")
        });
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines_up() {
        let services = vec![
            Service {
                models: vec!["llama3.2:latest".into(), "qwen".into()],
                ..Service::new(
                    ServiceKind::Ollama,
                    "http://127.0.0.1:11434".into(),
                    ServiceState::Available,
                )
            },
            Service::new(
                ServiceKind::Lmstudio,
                "http://127.0.0.1:1234".into(),
                ServiceState::Unavailable,
            )
            .with_detail("connection refused"),
            Service {
                inputs: vec!["ctl:pad".into()],
                ..Service::new(ServiceKind::Midi, "jack".into(), ServiceState::Available)
            },
        ];
        assert_eq!(
            render_table(&services),
            "SERVICE   ADDRESS                 STATE        MODELS / PORTS\n\
             ollama    http://127.0.0.1:11434  available    llama3.2:latest, qwen\n\
             lmstudio  http://127.0.0.1:1234   unavailable  connection refused\n\
             midi      jack                    available    in: ctl:pad; out: none\n"
        );
    }

    #[test]
    fn changes_between_discoveries() {
        let ollama = |state, models: &[&str]| Service {
            models: models.iter().map(|m| m.to_string()).collect(),
            ..Service::new(ServiceKind::Ollama, "http://127.0.0.1:11434".into(), state)
        };
        use ServiceState::{Available, Unavailable};
        assert_eq!(
            changes(&[], &[ollama(Available, &["a"])]),
            [Change::Appeared(ollama(Available, &["a"]))]
        );
        assert_eq!(
            changes(&[ollama(Available, &["a"])], &[ollama(Available, &["a"])]),
            []
        );
        assert_eq!(
            changes(
                &[ollama(Available, &["a"])],
                &[ollama(Available, &["a", "b"])]
            ),
            [Change::Updated(ollama(Available, &["a", "b"]))]
        );
        assert_eq!(
            changes(&[ollama(Available, &["a"])], &[ollama(Unavailable, &[])]),
            [Change::Vanished(ollama(Unavailable, &[]))]
        );
        assert_eq!(
            changes(&[ollama(Unavailable, &[])], &[ollama(Unavailable, &[])]),
            []
        );
        let gone = changes(&[ollama(Available, &["a"])], &[]);
        assert!(matches!(&gone[..], [Change::Vanished(s)] if s.state == Unavailable));
    }

    #[tokio::test]
    async fn watch_reports_appearance_and_vanishing() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            // Two answers, then the stand-in goes away.
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().await.unwrap();
                // Read the request first: closing with it unread would reset the connection.
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"object":"list","data":[{"id":"m"}]}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let config = DiscoveryConfig {
            ollama: addr,
            lmstudio: closed.clone(),
            openclaw: closed,
            openclaw_config: None,
            ..DiscoveryConfig::default()
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut stop_tx = Some(stop_tx);
        let mut seen = Vec::new();
        // A failure guard, not a timing assertion: the two changes come within a few ticks.
        let watching = watch(
            &config,
            Duration::from_millis(10),
            async {
                let _ = stop_rx.await;
            },
            |_, changed| {
                for change in changed {
                    let label = match change {
                        Change::Appeared(s) => format!("+{}", s.service.name()),
                        Change::Vanished(s) => format!("-{}", s.service.name()),
                        Change::Updated(s) => format!("~{}", s.service.name()),
                    };
                    seen.push(label);
                }
                if seen.len() >= 2
                    && let Some(tx) = stop_tx.take()
                {
                    let _ = tx.send(());
                }
            },
        );
        if tokio::time::timeout(Duration::from_secs(30), watching)
            .await
            .is_err()
        {
            panic!("no appearance and vanishing within 30 s");
        }
        assert_eq!(seen, ["+ollama", "-ollama"]);
        server.await.unwrap();
    }

    /// A one-connection stand-in on a free port that answers with `response` (or stays
    /// silent when it is `None`) after reading the request head.
    async fn stand_in(response: Option<&'static [u8]>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            match response {
                Some(response) => {
                    let _ = stream.write_all(response).await;
                }
                None => std::future::pending::<()>().await,
            }
        });
        addr
    }

    #[tokio::test]
    async fn probes_tell_nobody_there_from_a_wrong_answer() {
        let timeout = Duration::from_millis(300);
        let probe = |addr: String| async move {
            probe_openai_models(ServiceKind::Lmstudio, &addr, timeout).await
        };
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let refused = probe(closed).await;
        assert_eq!(refused.state, ServiceState::Unavailable);
        assert_eq!(refused.detail.as_deref(), Some("connection refused"));

        let silent = probe(stand_in(None).await).await;
        assert_eq!(silent.state, ServiceState::Unavailable);
        assert_eq!(silent.detail.as_deref(), Some("no answer within 300 ms"));

        let chunked = probe(
            stand_in(Some(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                  7\r\n{\"data\"\r\nf\r\n:[{\"id\":\"m1\"}]}\r\n0\r\n\r\n",
            ))
            .await,
        )
        .await;
        assert_eq!(chunked.state, ServiceState::Available, "{chunked:?}");
        assert_eq!(chunked.models, ["m1"]);

        let until_close =
            probe(stand_in(Some(b"HTTP/1.1 200 OK\r\n\r\n{\"data\":[{\"id\":\"m2\"}]}")).await)
                .await;
        assert_eq!(until_close.models, ["m2"], "{until_close:?}");

        let not_found =
            probe(stand_in(Some(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")).await)
                .await;
        assert_eq!(not_found.state, ServiceState::Error);
        assert_eq!(
            not_found.detail.as_deref(),
            Some("GET /v1/models: HTTP 404")
        );

        let not_a_list =
            probe(stand_in(Some(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n<html>")).await)
                .await;
        assert_eq!(not_a_list.state, ServiceState::Error, "{not_a_list:?}");

        let not_http = probe(stand_in(Some(b"SSH-2.0-OpenSSH_9.2\r\n")).await).await;
        assert_eq!(not_http.state, ServiceState::Error, "{not_http:?}");
        assert!(
            not_http
                .detail
                .as_deref()
                .unwrap_or("")
                .starts_with("GET /v1/models: "),
            "{not_http:?}"
        );
    }

    #[test]
    fn settings_defaults() {
        let settings: DiscoverySettings = serde_json::from_str("{}").unwrap();
        assert_eq!(settings, DiscoverySettings::default());
        assert_eq!(settings.interval_ms, 30_000);
        assert!(serde_json::from_str::<DiscoverySettings>(r#"{"enable": true}"#).is_err());
    }

    #[test]
    fn json_shape() {
        let service = Service {
            token_found: Some(true),
            ..Service::new(
                ServiceKind::Openclaw,
                "127.0.0.1:18789".into(),
                ServiceState::Available,
            )
        };
        assert_eq!(
            serde_json::to_value(&service).unwrap(),
            serde_json::json!({"service": "openclaw", "address": "127.0.0.1:18789", "state": "available", "token_found": true})
        );
    }

    #[test]
    fn openclaw_token_is_detected_never_returned() {
        let dir = std::env::temp_dir().join(format!("pb-discovery-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("openclaw.json");
        std::fs::write(&path, r#"{"gateway":{"auth":{"token":"s3cr3t-token"}}}"#).unwrap();
        let (found, remark) = openclaw_token_status(&path);
        assert!(found);
        assert!(!remark.contains("s3cr3t"), "{remark}");
        std::fs::write(&path, r#"{"gateway":{"auth":{"token":""}}}"#).unwrap();
        assert!(!openclaw_token_status(&path).0);
        std::fs::write(&path, "{not json").unwrap();
        let (found, remark) = openclaw_token_status(&path);
        assert!(!found);
        assert!(remark.contains("is not JSON"), "{remark}");
        std::fs::remove_file(&path).unwrap();
        let (found, remark) = openclaw_token_status(&path);
        assert!(!found);
        assert!(remark.starts_with("no "), "{remark}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
