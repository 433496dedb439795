//! The reconnect driver and the WebSocket client against real loopback servers: giving
//! up after `max_attempts`, the count reset by a successful connection, `wss://` with a
//! local CA (`ca_file`), and URLs redacted in health details.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use patchbay_graph::{
    BoxFuture, ChannelOutput, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Registry,
    RunningGraph, Source, SourceContext, SourceText, compile,
};
use patchbay_testkit::scratch::ScratchDir;
use patchbay_transport::{
    Defaults, Driver, Ended, Link, Scheme, TransportConfig, TransportOptions, WsStream,
    parse_options,
};
use serde::Deserialize;
use tokio::net::TcpListener;

/// A WebSocket adapter reduced to nothing: connect, then wait for the server to close.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
struct ProbeDefaults;

impl Defaults for ProbeDefaults {
    const SCHEME: Scheme = Scheme::WebSocket;
    const URL_EXAMPLE: &'static str = "ws://127.0.0.1:9/";
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ProbeConfig {
    #[serde(flatten)]
    transport: TransportOptions<ProbeDefaults>,
}

impl TransportConfig for ProbeConfig {
    type Defaults = ProbeDefaults;
    fn transport(&self) -> &TransportOptions<ProbeDefaults> {
        &self.transport
    }
}

struct Probe {
    config: ProbeConfig,
}

impl Link for Probe {
    type Connection = WsStream;

    async fn connect(&mut self, _ends: &LinkEnds<'_>) -> Result<WsStream, Ended> {
        self.config.transport.open_websocket([]).await
    }

    async fn session(&mut self, mut ws: WsStream, _ends: &LinkEnds<'_>) -> Ended {
        loop {
            match ws.next().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Ended::Lost(patchbay_transport::describe_ws_error(&e)),
                None => return Ended::Lost("the server closed the connection".into()),
            }
        }
    }
}

impl Source for Probe {
    fn run(mut self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            Driver::new("probe", &self.config.transport, LinkEnds::source(&cx))
                .run(&mut *self)
                .await
        })
    }
}

fn build(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(Probe {
        config: parse_options(options)?,
    }))
}

fn start(options: &str) -> RunningGraph {
    let mut registry = Registry::new();
    registry.source("probe", build);
    let _ui = ChannelOutput::register(&mut registry, "ui", 8);
    let config = format!(
        "[sources.probe]\ntype = \"probe\"\n{options}\n\n[outputs.ui]\ntype = \"ui\"\ninputs = [\"probe\"]\n"
    );
    let graph = compile(&[SourceText::new("probe.toml", config)], &registry).expect("compiles");
    RunningGraph::spawn(graph)
}

/// A WebSocket server that accepts `connections` upgrades and closes each at once.
async fn closing_server(listener: TcpListener, accepted: Arc<AtomicUsize>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        if let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let _ = ws.close(None).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_after_max_attempts_failed() {
    // A server that takes TCP connections and drops them: every handshake fails.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&dropped);
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(tcp);
        }
    });
    let graph = start(&format!(
        "url = \"ws://127.0.0.1:{port}/?token=s3cret\"\nmax_attempts = 2\nbackoff_initial_ms = 5\nbackoff_max_ms = 10"
    ));
    let report = tokio::time::timeout(Duration::from_secs(20), graph.wait())
        .await
        .expect("the probe gives up and the graph ends")
        .expect("graph task");
    let probe = report.telemetry.component("probe").expect("stats");
    assert_eq!(probe.state, HealthState::Failed);
    let error = probe.last_error.clone().unwrap_or_default();
    assert!(error.contains("gave up after 2 attempts"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
    // The first attempt and two retries.
    assert_eq!(dropped.load(Ordering::SeqCst), 3);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_connection_resets_the_attempts() {
    // Each connection succeeds and is then lost: with `max_attempts = 1` the link would
    // give up at the second loss if a success did not start the count again.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn(closing_server(listener, Arc::clone(&accepted)));
    let graph = start(&format!(
        "url = \"ws://127.0.0.1:{port}/\"\nmax_attempts = 1\nbackoff_initial_ms = 5\nbackoff_max_ms = 10"
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while accepted.load(Ordering::SeqCst) < 5 {
        assert!(tokio::time::Instant::now() < deadline, "reconnects stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = graph.stop().await.expect("graph task");
    let probe = report.telemetry.component("probe").expect("stats");
    assert_ne!(probe.state, HealthState::Failed, "{probe:?}");
    assert!(
        !probe.last_error.unwrap_or_default().contains("gave up"),
        "the count was reset"
    );
    server.abort();
}

/// A CA, and a certificate for `localhost` it signed: (CA PEM, server config).
fn local_ca() -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("server key");
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("server params")
        .signed_by(&key, &issuer)
        .expect("server cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("server config");
    (ca_cert.pem(), Arc::new(server))
}

/// A `wss://` server on loopback: accepts TLS connections, upgrades them, sends `hello`.
async fn tls_server(listener: TcpListener, config: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    while let Ok((tcp, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            if let Ok(mut ws) = tokio_tungstenite::accept_async(tls).await {
                use futures_util::SinkExt;
                let _ = ws
                    .send(tokio_tungstenite::tungstenite::Message::text("hello"))
                    .await;
                while let Some(Ok(_)) = ws.next().await {}
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_with_a_local_ca() {
    let (ca_pem, server_config) = local_ca();
    let dir = ScratchDir::new("transport-wss");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("write CA");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(tls_server(listener, server_config));
    let url = format!("wss://localhost:{port}/ws");

    // Trusting the CA: the connection opens and the server's frame arrives.
    let mut options = TransportOptions::<ProbeDefaults>::new(url.clone());
    options.ca_file = Some(ca_file.clone());
    let mut ws = tokio::time::timeout(Duration::from_secs(10), options.open_websocket([]))
        .await
        .expect("in time")
        .expect("wss connects with the local CA");
    let frame = ws.next().await.expect("a frame").expect("no error");
    assert_eq!(frame.into_text().expect("text").as_str(), "hello");

    // Without it the server is not trusted: a retryable failure that says why.
    let untrusted = TransportOptions::<ProbeDefaults>::new(url);
    match untrusted.open_websocket([]).await {
        Err(Ended::Lost(reason)) => assert!(reason.contains("UnknownIssuer"), "{reason}"),
        other => panic!("expected a TLS failure, got {:?}", other.map(|_| ())),
    }

    // A CA file that is not PEM is refused (no retry can fix it).
    std::fs::write(&ca_file, "not a certificate").expect("write");
    match options.open_websocket([]).await {
        Err(Ended::Refused(reason)) => assert!(reason.contains("CA file"), "{reason}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_details_show_the_url_redacted() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn(closing_server(listener, Arc::clone(&accepted)));
    let graph = start(&format!(
        "url = \"ws://me:pw@127.0.0.1:{port}/?access_token=s3cret&room=1\"\nbackoff_initial_ms = 5\nbackoff_max_ms = 10"
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while accepted.load(Ordering::SeqCst) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no connection");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = graph.stop().await.expect("graph task");
    let probe = report.telemetry.component("probe").expect("stats");
    let shown = format!("{probe:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("pw@"),
        "{shown}"
    );
    server.abort();
}

/// A WebSocket server that sends each client one text message of `size` bytes, then
/// waits for it to go.
async fn big_message_server(listener: TcpListener, size: usize, accepted: Arc<AtomicUsize>) {
    use futures_util::SinkExt;
    while let Ok((tcp, _)) = listener.accept().await {
        let accepted = Arc::clone(&accepted);
        tokio::spawn(async move {
            if let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let big = "x".repeat(size);
                let _ = ws
                    .send(tokio_tungstenite::tungstenite::Message::text(big))
                    .await;
                while let Some(Ok(_)) = ws.next().await {}
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_frame_is_counted_and_resets_the_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn(big_message_server(listener, 4096, Arc::clone(&accepted)));
    let graph = start(&format!(
        "url = \"ws://127.0.0.1:{port}/\"\nmax_frame = 1024\nbackoff_initial_ms = 5\nbackoff_max_ms = 10"
    ));
    // Each connection gets the message, refuses it, and is opened again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while accepted.load(Ordering::SeqCst) < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reconnection after an oversized message"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = graph.stop().await.expect("graph task");
    let probe = report.telemetry.component("probe").expect("stats");
    assert!(probe.bad_input >= 2, "{probe:?}");
    let error = probe.last_error.clone().unwrap_or_default();
    assert!(error.contains("max_frame"), "{error}");
    server.abort();
}
