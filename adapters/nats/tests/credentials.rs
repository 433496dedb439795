//! Credentials files (`.creds`: a user JWT and the user's NKey seed) against a real
//! `nats-server` in operator mode. The test makes its own operator, account and user keys
//! and signs their JWTs with `nkeys` (what `nsc` does), so it needs nothing but the
//! server. It drives the adapter in process, between a program's channels.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nkeys::KeyPair;
use patchbay_graph::{
    ChannelOutput, ChannelSource, HealthState, Registry, RunningGraph, SourceText, compile,
};
use patchbay_signal::{Signal, object};
use patchbay_testkit::nats_server::NatsServer;
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};

/// A JWT as NATS reads them: `ed25519-nkey`, signed by `issuer`, about `subject`.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let iat = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let claims = json!({
        "jti": format!("{}{iat}", &subject[..16]),
        "iat": iat,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = issuer.sign(signed.as_bytes()).expect("signs");
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An operator, one account it signs, and the server configuration trusting them.
struct Trust {
    account: KeyPair,
    config: PathBuf,
}

impl Trust {
    fn new(dir: &ScratchDir) -> Trust {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let operator_jwt = jwt(
            &operator,
            &operator.public_key(),
            "test-operator",
            json!({"type": "operator", "version": 2}),
        );
        let unlimited = json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
        });
        let account_jwt = jwt(
            &operator,
            &account.public_key(),
            "test-account",
            json!({"limits": unlimited, "type": "account", "version": 2}),
        );
        let operator_file = dir.join("operator.jwt");
        std::fs::write(&operator_file, operator_jwt).unwrap();
        let config = dir.join("server.conf");
        std::fs::write(
            &config,
            format!(
                "operator: \"{}\"\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{account_jwt}\"\n}}\n",
                operator_file.display(),
                account.public_key()
            ),
        )
        .unwrap();
        Trust { account, config }
    }

    /// A credentials file for a new user of `account` (signed by `signer`).
    fn creds(dir: &ScratchDir, name: &str, signer: &KeyPair) -> PathBuf {
        let user = KeyPair::new_user();
        let user_jwt = jwt(
            signer,
            &user.public_key(),
            name,
            json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                   "type": "user", "version": 2}),
        );
        let path = dir.join(format!("{name}.creds"));
        std::fs::write(
            &path,
            format!(
                "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
                 ************************* IMPORTANT *************************\n\
                 NKEY Seed printed below can be used to sign and prove identity.\n\n\
                 -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
                user.seed().expect("a seed")
            ),
        )
        .unwrap();
        path
    }
}

/// A graph: `feed` → nats output (with `out_creds`), nats source (with `in_creds`) → `seen`.
fn graph(
    url: &str,
    out_creds: &Path,
    in_creds: Option<&Path>,
) -> (
    tokio::sync::mpsc::Sender<Signal>,
    tokio::sync::mpsc::Receiver<patchbay_signal::SharedSignal>,
    RunningGraph,
) {
    let mut registry = Registry::from_adapters([&patchbay_nats::ADAPTER]);
    let feed = ChannelSource::register(&mut registry, "feed", 64);
    let seen = ChannelOutput::register(&mut registry, "seen", 64);
    let mut config = format!(
        "[sources.app]\ntype = \"feed\"\n\n[outputs.bus]\ntype = \"nats\"\ninputs = [\"app\"]\nurl = \"{url}\"\ncredentials = \"{}\"\n",
        out_creds.display()
    );
    if let Some(creds) = in_creds {
        config.push_str(&format!(
            "\n[sources.bus_in]\ntype = \"nats\"\nurl = \"{url}\"\nsubject = \"patchbay.>\"\ncredentials = \"{}\"\n\n[outputs.back]\ntype = \"seen\"\ninputs = [\"bus_in\"]\n",
            creds.display()
        ));
    }
    let graph = compile(&[SourceText::new("creds.toml", &config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    drop(registry);
    (feed, seen, RunningGraph::spawn(graph))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_file_signed_by_the_account_connects_both_ways() {
    const N: u64 = 50;
    let dir = ScratchDir::new("nats-creds");
    let trust = Trust::new(&dir);
    let server = NatsServer::start(&["-c", trust.config.to_str().expect("a UTF-8 path")]);
    let url = server.url.clone();
    let publisher = Trust::creds(&dir, "publisher", &trust.account);
    let subscriber = Trust::creds(&dir, "subscriber", &trust.account);

    let (feed, mut seen, running) = graph(&url, &publisher, Some(&subscriber));
    let start = Instant::now();
    while server.subscriptions() < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the source never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..N {
        let signal = Signal::new("tick", "test:creds", object! { "i" => i });
        feed.send(signal).await.expect("the graph takes it");
    }
    let mut got = Vec::new();
    while (got.len() as u64) < N {
        let signal = tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .expect("every signal within 30 s")
            .expect("the graph runs");
        got.push(signal.payload["i"].as_u64().expect("payload.i"));
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "in order, each once");
    drop(feed);
    let report = running.stop().await.expect("the graph ends");
    for name in ["bus", "bus_in"] {
        let c = report.telemetry.component(name).expect(name);
        assert_eq!(c.gauges.get("nats_auth_failures"), Some(&0.0), "{c:?}");
        assert!(c.last_error.is_none(), "{c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_file_the_server_does_not_trust_fails_without_retrying() {
    let dir = ScratchDir::new("nats-creds-wrong");
    let trust = Trust::new(&dir);
    let server = NatsServer::start(&["-c", trust.config.to_str().expect("a UTF-8 path")]);
    let url = server.url.clone();
    // A well-formed file for a user of an account the operator never signed.
    let stranger = Trust::creds(&dir, "stranger", &KeyPair::new_account());
    let seed = std::fs::read_to_string(&stranger).unwrap();
    let seed = seed
        .lines()
        .find(|l| l.starts_with("SU"))
        .expect("a user seed")
        .to_owned();

    let (feed, _seen, running) = graph(&url, &stranger, None);
    for i in 0..5 {
        let signal = Signal::new("tick", "test:creds", object! { "i" => i });
        feed.send(signal).await.expect("the graph takes it");
    }
    drop(feed);
    // The input ends and the failed output refuses what it was sent: the graph ends.
    let report = tokio::time::timeout(Duration::from_secs(60), running.wait())
        .await
        .expect("the graph ends on its own")
        .expect("it ends");
    let bus = report.telemetry.component("bus").expect("bus");
    assert_eq!(bus.state, HealthState::Failed, "{bus:?}");
    assert_eq!(
        bus.bad_input, 5,
        "every signal refused and counted: {bus:?}"
    );
    assert_eq!(bus.sent, 0, "{bus:?}");
    assert_eq!(
        bus.gauges.get("nats_auth_failures"),
        Some(&1.0),
        "refused once, not retried: {bus:?}"
    );
    let error = bus.last_error.clone().unwrap_or_default();
    assert!(
        error.contains(&url) && error.contains("refused the credentials"),
        "{error}"
    );
    assert!(!format!("{bus:?}").contains(&seed), "no seed in {bus:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_credentials_file_is_named_without_its_content() {
    let dir = ScratchDir::new("nats-creds-bad");
    let bad = dir.join("bad.creds");
    std::fs::write(&bad, "not a JWT: SUAMSECRETSEEDVALUE\n").unwrap();
    // No server is needed: the file is read before connecting.
    let (feed, _seen, running) = graph("nats://127.0.0.1:9", &bad, None);
    feed.send(Signal::new("tick", "test:creds", object! {}))
        .await
        .unwrap();
    drop(feed);
    let report = tokio::time::timeout(Duration::from_secs(30), running.wait())
        .await
        .expect("the graph ends on its own")
        .expect("it ends");
    let bus = report.telemetry.component("bus").expect("bus");
    assert_eq!(bus.state, HealthState::Failed, "{bus:?}");
    assert_eq!(bus.bad_input, 1, "{bus:?}");
    let error = bus.last_error.clone().unwrap_or_default();
    assert!(
        error.contains(&bad.display().to_string())
            && error.contains("not a valid credentials file"),
        "{error}"
    );
    assert!(!error.contains("SUAMSECRET"), "{error}");
}
