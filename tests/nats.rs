//! patchbay processes on one real `nats-server`: core NATS between two processes with
//! wildcard subjects, a queue group shared by two subscribers, token and user/password
//! authentication (and wrong credentials: a clear, counted failure that shows no secret),
//! and JetStream: a publisher replays signals into a stream, a subscriber reads them
//! through a durable consumer into a file, and is stopped and restarted mid-stream. Every
//! signal arrives, once. (Credentials files are tested in `adapters/nats/tests`, which
//! makes its own operator, account and user keys.)

#![cfg(feature = "nats")]

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use patchbay_testkit::nats_server::NatsServer;
use patchbay_testkit::process::{Daemon, free_port, http};
use patchbay_testkit::scratch::ScratchDir;

/// Waits until `done` holds, at most `limit` (a bound against hanging, not a timing
/// assertion).
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn patchbay(config: &Path, log: &Path) -> Daemon {
    patchbay_with(config, log, "info", &[])
}

/// `patchbay run CONFIG` with this log level and environment, its stderr to `log`.
fn patchbay_with(config: &Path, log: &Path, level: &str, env: &[(&str, &str)]) -> Daemon {
    let log = std::fs::File::create(log).expect("a log file");
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["run", &config.display().to_string()])
            .env("PATCHBAY_LOG", level)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("patchbay starts"),
    )
}

/// A scenario file of `n` signals, sent as fast as the graph takes them: every fifth an
/// `alert` from `test:b`, the others `tick`s from `test:a`; `payload.i` numbers them.
fn scenario(dir: &ScratchDir, n: u64) -> std::path::PathBuf {
    let path = dir.join("signals.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    for i in 0..n {
        let (kind, source) = if i % 5 == 0 {
            ("alert", "test:b")
        } else {
            ("tick", "test:a")
        };
        writeln!(
            file,
            r#"{{"delayMs": 0, "signal": {{"id": "s-{i}", "type": "{kind}", "source": "{source}", "payload": {{"i": {i}, "message": "m{i}"}}}}}}"#
        )
        .unwrap();
    }
    path
}

/// A config publishing `scenario` on NATS with the default subject template.
fn publisher_config(scenario: &Path, url: &str, auth: &str) -> String {
    format!(
        r#"[sources.signals]
type = "file"
path = "{}"
format = "scenario"
speed = 0

[outputs.bus]
type = "nats"
inputs = ["signals"]
url = "{url}"
{auth}
"#,
        scenario.display()
    )
}

/// A config writing what `subject` brings to `out`, with extra source options.
fn subscriber_config(url: &str, subject: &str, extra: &str, out: &Path) -> String {
    format!(
        r#"[sources.bus]
type = "nats"
url = "{url}"
subject = "{subject}"
{extra}

[outputs.out]
type = "file"
inputs = ["bus"]
path = "{}"
"#,
        out.display()
    )
}

/// `payload.i` of every signal in a file, sorted, with the count before deduplication.
fn numbers(path: &Path) -> (usize, Vec<u64>) {
    let mut seen: Vec<u64> = lines(path)
        .iter()
        .map(|s| s["payload"]["i"].as_u64().expect("payload.i"))
        .collect();
    let total = seen.len();
    seen.sort_unstable();
    seen.dedup();
    (total, seen)
}

/// Runs a publisher of `n` signals to its end, once the server holds `subscriptions`.
fn publish(
    dir: &ScratchDir,
    server: &NatsServer,
    subscriptions: u64,
    n: u64,
    auth: &str,
    env: &[(&str, &str)],
) {
    wait_until(Duration::from_secs(30), "the subscribers", || {
        server.subscriptions() >= subscriptions
    });
    let config = dir.join("pub.toml");
    std::fs::write(
        &config,
        publisher_config(&scenario(dir, n), &server.url, auth),
    )
    .unwrap();
    let mut publisher = patchbay_with(&config, &dir.join("pub.log"), "info", env);
    wait_until(Duration::from_secs(60), "the publisher", || {
        matches!(publisher.0.try_wait(), Ok(Some(_)))
    });
    assert!(
        publisher.0.wait().unwrap().success(),
        "the publisher ends cleanly: {}",
        std::fs::read_to_string(dir.join("pub.log")).unwrap_or_default()
    );
}

#[test]
fn core_nats_between_two_processes_with_wildcard_subjects() {
    const N: u64 = 500;
    let dir = ScratchDir::new("nats-core");
    let server = NatsServer::start(&[]);
    let alerts = dir.join("alerts.jsonl");
    let everything = dir.join("everything.jsonl");
    let of_a = dir.join("a.jsonl");
    let mut subscribers = Vec::new();
    for (name, subject, out) in [
        ("alerts", "patchbay.*.alert", &alerts),
        ("all", "patchbay.>", &everything),
        ("a", "patchbay.test:a.*", &of_a),
    ] {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, subscriber_config(&server.url, subject, "", out)).unwrap();
        subscribers.push(patchbay(&config, &dir.join(format!("{name}.log"))));
    }
    publish(&dir, &server, 3, N, "", &[]);

    wait_until(Duration::from_secs(60), "every signal", || {
        lines(&everything).len() as u64 >= N && lines(&alerts).len() as u64 >= N / 5
    });
    for s in subscribers {
        assert!(s.terminate().success(), "a subscriber stops cleanly");
    }
    let (total, all) = numbers(&everything);
    assert_eq!(total as u64, N, "`>` gets each signal once");
    assert_eq!(all, (0..N).collect::<Vec<_>>());
    let (total, got) = numbers(&alerts);
    assert_eq!(total as u64, N / 5, "`*` gets each alert once");
    assert_eq!(got, (0..N).filter(|i| i % 5 == 0).collect::<Vec<_>>());
    assert!(
        lines(&alerts)
            .iter()
            .all(|s| s["type"] == "alert" && s["source"] == "test:b")
    );
    // `{source}` made one token of `test:a` (a colon is allowed in a subject).
    let (_, a) = numbers(&of_a);
    assert_eq!(a, (0..N).filter(|i| i % 5 != 0).collect::<Vec<_>>());
}

#[test]
fn a_queue_group_delivers_each_signal_to_exactly_one_member() {
    const N: u64 = 1000;
    let dir = ScratchDir::new("nats-queue");
    let server = NatsServer::start(&[]);
    let outs = [dir.join("w1.jsonl"), dir.join("w2.jsonl")];
    let mut workers: Vec<Daemon> = outs
        .iter()
        .enumerate()
        .map(|(i, out)| {
            let config = dir.join(format!("w{i}.toml"));
            std::fs::write(
                &config,
                subscriber_config(&server.url, "patchbay.>", r#"queue_group = "workers""#, out),
            )
            .unwrap();
            patchbay(&config, &dir.join(format!("w{i}.log")))
        })
        .collect();
    // A subscriber outside the group gets every signal all the same.
    let observed = dir.join("observer.jsonl");
    let config = dir.join("observer.toml");
    std::fs::write(
        &config,
        subscriber_config(&server.url, "patchbay.>", "", &observed),
    )
    .unwrap();
    workers.push(patchbay(&config, &dir.join("observer.log")));
    publish(&dir, &server, 3, N, "", &[]);

    wait_until(Duration::from_secs(60), "every signal", || {
        outs.iter().map(|o| lines(o).len() as u64).sum::<u64>() >= N
            && lines(&observed).len() as u64 >= N
    });
    for w in workers {
        assert!(w.terminate().success(), "a subscriber stops cleanly");
    }
    assert_eq!(numbers(&observed), (N as usize, (0..N).collect::<Vec<_>>()));
    let (n1, first) = numbers(&outs[0]);
    let (n2, second) = numbers(&outs[1]);
    assert_eq!(n1, first.len(), "no signal twice to one member");
    assert_eq!(n2, second.len(), "no signal twice to one member");
    assert!(
        !first.is_empty() && !second.is_empty(),
        "both members got some ({} and {})",
        first.len(),
        second.len()
    );
    assert!(
        first.iter().all(|i| second.binary_search(i).is_err()),
        "no signal to both members"
    );
    let mut all: Vec<u64> = first.into_iter().chain(second).collect();
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>(), "together, every signal");
}

#[test]
fn token_and_user_password_authentication() {
    const N: u64 = 100;
    for (name, server_args, auth) in [
        (
            "token",
            ["--auth", "t0ken-s3cret-4a1", "", ""],
            r#"token = "${NATS_TEST_SECRET}""#,
        ),
        (
            "user",
            ["--user", "agent", "--pass", "t0ken-s3cret-4a1"],
            r#"user = "agent"
password = "${NATS_TEST_SECRET}""#,
        ),
    ] {
        let dir = ScratchDir::new(&format!("nats-auth-{name}"));
        let args: Vec<&str> = server_args.into_iter().filter(|a| !a.is_empty()).collect();
        let server = NatsServer::start(&args);
        let env = [("NATS_TEST_SECRET", "t0ken-s3cret-4a1")];
        let out = dir.join("out.jsonl");
        let config = dir.join("sub.toml");
        std::fs::write(
            &config,
            subscriber_config(&server.url, "patchbay.>", auth, &out),
        )
        .unwrap();
        let sub = patchbay_with(&config, &dir.join("sub.log"), "info", &env);
        publish(&dir, &server, 1, N, auth, &env);
        wait_until(Duration::from_secs(60), "every signal", || {
            lines(&out).len() as u64 >= N
        });
        assert!(sub.terminate().success(), "the subscriber stops cleanly");
        assert_eq!(
            numbers(&out).1,
            (0..N).collect::<Vec<_>>(),
            "{name}: every signal"
        );
    }
}

#[test]
fn wrong_credentials_fail_clearly_are_counted_and_show_no_secret() {
    let dir = ScratchDir::new("nats-wrong-auth");
    let server = NatsServer::start(&["--user", "agent", "--pass", "right-pa55word-9f"]);
    let http_port = free_port();
    // Secrets written in the config itself (not `${ENV}`, whose values patchbay scrubs from
    // messages anyway): nothing may show them.
    let scenario = scenario(&dir, 20);
    let config = dir.join("wrong.toml");
    std::fs::write(
        &config,
        format!(
            r#"[sources.signals]
type = "file"
path = "{}"
format = "scenario"
speed = 0

[sources.bus]
type = "nats"
url = "{url}"
token = "wr0ng-t0ken-77c"

[outputs.out]
type = "nats"
inputs = ["signals"]
url = "{url}"
user = "agent"
password = "wr0ng-pa55word-3e"

[outputs.ui]
type = "sidecar"
inputs = ["bus"]
listen = "127.0.0.1:{http_port}"
"#,
            scenario.display(),
            url = server.url
        ),
    )
    .unwrap();
    let log = dir.join("wrong.log");
    let daemon = patchbay_with(&config, &log, "debug", &[]);
    let health = |path| {
        http(([127, 0, 0, 1], http_port).into(), "GET", path, &[], b"")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    wait_until(
        Duration::from_secs(30),
        "both NATS components failed",
        || {
            let refused = lines_of(
                &health("/metrics"),
                "patchbay_bad_input_total{component=\"out\"",
            );
            health("/health").matches("refused the credentials").count() >= 2
                && refused.is_some_and(|n| n >= 20.0)
        },
    );
    let status = health("/health");
    let metrics = health("/metrics");
    assert!(
        daemon.terminate().success(),
        "the daemon still stops cleanly"
    );
    let logs = std::fs::read_to_string(&log).unwrap();

    let h: serde_json::Value = serde_json::from_str(&status).expect("/health is JSON");
    let component = |name: &str| {
        h["components"]
            .as_array()
            .expect("components")
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {status}"))
    };
    for name in ["bus", "out"] {
        let c = component(name);
        assert_eq!(c["state"], "failed", "{c}");
        let error = c["last_error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&server.url) && error.contains("refused the credentials"),
            "a clear error naming the server: {c}"
        );
    }
    // The output refused (and counted) every signal the graph still sent it.
    assert_eq!(component("out")["bad_input"], 20, "{status}");
    for name in ["bus", "out"] {
        assert_eq!(
            lines_of(
                &metrics,
                &format!("patchbay_nats_auth_failures{{component=\"{name}\"}}")
            ),
            Some(1.0),
            "one refusal counted, not retried: {metrics}"
        );
    }
    assert!(logs.contains("refused the credentials"), "{logs}");
    for secret in ["wr0ng-t0ken-77c", "wr0ng-pa55word-3e", "right-pa55word-9f"] {
        for (what, text) in [
            ("logs", &logs),
            ("/health", &status),
            ("/metrics", &metrics),
        ] {
            assert!(!text.contains(secret), "{secret} in the {what}:\n{text}");
        }
    }
}

/// The value of the first metrics line starting with `prefix`.
fn lines_of(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn jetstream_delivers_every_signal_once_across_a_subscriber_restart() {
    const N: u64 = 5_000;
    let dir = ScratchDir::new("nats-js");
    let store = dir.join("js");
    let server = NatsServer::start(&["-js", "-sd", &store.display().to_string()]);
    let url = &server.url;

    // The whole backlog is in the stream before the subscriber starts: it is behind from
    // its first message, so it is stopped with messages already sent to it and not yet
    // handled, the case where a message could be left unacknowledged.
    let scenario = dir.join("ticks.jsonl");
    let mut file = std::fs::File::create(&scenario).unwrap();
    for i in 0..N {
        writeln!(
            file,
            r#"{{"delayMs": 0, "signal": {{"id": "tick-{i}", "type": "tick", "source": "test:pub", "payload": {{"i": {i}}}}}}}"#
        )
        .unwrap();
    }
    drop(file);
    let publisher = dir.join("pub.toml");
    std::fs::write(
        &publisher,
        format!(
            r#"[sources.ticks]
type = "file"
path = "{}"
format = "scenario"
speed = 1.0

[outputs.bus]
type = "nats"
inputs = ["ticks"]
url = "{url}"
jetstream = {{ stream = "PATCHBAY" }}
"#,
            scenario.display()
        ),
    )
    .unwrap();
    let mut publ = patchbay(&publisher, &dir.join("pub.log"));
    wait_until(Duration::from_secs(60), "the publisher", || {
        matches!(publ.0.try_wait(), Ok(Some(_)))
    });
    assert!(
        publ.0.wait().unwrap().success(),
        "the publisher ends cleanly"
    );

    let received = dir.join("received.jsonl");
    let subscriber = dir.join("sub.toml");
    std::fs::write(
        &subscriber,
        format!(
            r#"[sources.bus]
type = "nats"
url = "{url}"
subject = "patchbay.>"
jetstream = {{ stream = "PATCHBAY", durable = "sub" }}

[outputs.out]
type = "file"
inputs = ["bus"]
path = "{}"
"#,
            received.display()
        ),
    )
    .unwrap();

    let sub = patchbay(&subscriber, &dir.join("sub1.log"));
    wait_until(Duration::from_secs(60), "the first signals", || {
        lines(&received).len() >= 50
    });
    assert!(sub.terminate().success(), "the subscriber stops cleanly");
    let before = lines(&received).len();
    assert!((before as u64) < N, "stopped mid-stream ({before} of {N})");

    let sub = patchbay(&subscriber, &dir.join("sub2.log"));
    wait_until(Duration::from_secs(60), "every signal", || {
        lines(&received).len() as u64 >= N
    });
    assert!(sub.terminate().success(), "the subscriber stops cleanly");

    let seen: Vec<u64> = lines(&received)
        .iter()
        .map(|s| {
            assert_eq!(s["type"], "tick");
            s["payload"]["i"].as_u64().expect("payload.i")
        })
        .collect();
    // In order across the restart too: the stopped subscriber left no message delivered
    // and unacknowledged, which the server would send again only after its ack wait,
    // behind the later ones.
    if let Some(at) = seen.windows(2).position(|w| w[0] >= w[1]) {
        panic!(
            "not every signal once and in order: {} then {} (the first subscriber got {before})",
            seen[at],
            seen[at + 1]
        );
    }
    assert_eq!(seen, (0..N).collect::<Vec<_>>(), "every signal");
}
