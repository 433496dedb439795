//! The `mqtt` source and output against a real `mosquitto`: envelopes out and back in at
//! QoS 0 and 1 over MQTT 3.1.1 and 5, raw messages from an independent client
//! (`mosquitto_pub`), wildcards, retained states for a late subscriber, malformed
//! payloads, and `mqtts://` with a private CA.

mod mosquitto;

use std::collections::BTreeMap;

use mosquitto::{Graph, Mosquitto, Setup, final_of, wait_for};
use patchbay_graph::HealthState;
use patchbay_signal::{Signal, object};
use serde_json::json;

/// A graph with an `mqtt` output (`feed` → broker) and an `mqtt` source (broker → `seen`)
/// on `prefix/…`.
fn round_trip_config(url: &str, version: &str, qos: u8, prefix: &str, extra: &str) -> String {
    format!(
        "[outputs.out]\ntype = \"mqtt\"\ninputs = [\"feed\"]\nurl = \"{url}\"\nversion = \"{version}\"\n\
         qos = {qos}\ntopic = \"{prefix}/{{source}}/{{type}}\"\nclient_id = \"{prefix}-out\"\n{extra}\n\
         [sources.in]\ntype = \"mqtt\"\nurl = \"{url}\"\nversion = \"{version}\"\nqos = {qos}\n\
         topics = [\"{prefix}/#\"]\nclient_id = \"{prefix}-in\"\n{extra}\n\
         [outputs.back]\ntype = \"seen\"\ninputs = [\"in\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_out_and_back_at_qos_1_and_0_over_3_1_1_and_5() {
    const N: u64 = 200;
    let broker = Mosquitto::start(Setup::default());
    for version in ["3.1.1", "5"] {
        for qos in [1u8, 0] {
            let prefix = format!("rt{}q{qos}", version.replace('.', ""));
            let mut graph =
                Graph::start(&round_trip_config(&broker.url(), version, qos, &prefix, "")).await;
            graph.subscribed("in", 1).await;
            let mut sent = Vec::new();
            for i in 0..N {
                let signal = Signal::new("tick", "test:app", object! {"i" => i, "v" => version});
                sent.push(signal.id.to_string());
                graph.feed.send(signal).await.expect("the graph takes it");
            }
            let mut got = Vec::new();
            while (got.len() as u64) < N {
                let s = graph.next().await;
                assert_eq!(s.kind, "tick");
                assert_eq!(s.source, "test:app", "the envelope's own source is kept");
                assert!(s.metadata.is_none(), "nothing added: {s:?}");
                got.push(s.id.to_string());
            }
            assert_eq!(
                got, sent,
                "{version} QoS {qos}: every signal once, in order, ids kept"
            );
            wait_for("every signal acknowledged", || {
                graph.component("out").sent == N
            })
            .await;
            let out = graph.component("out");
            assert_eq!(out.gauges.get("mqtt_inflight"), Some(&0.0), "{out:?}");
            let report = graph.stop().await;
            let (out, inbound) = (final_of(&report, "out"), final_of(&report, "in"));
            assert_eq!((out.sent, out.dropped, out.bad_input), (N, 0, 0), "{out:?}");
            assert_eq!((inbound.sent, inbound.bad_input), (N, 0), "{inbound:?}");
            assert_eq!(out.state, HealthState::Stopped, "{out:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_messages_from_a_plain_client_become_mqtt_message() {
    let broker = Mosquitto::start(Setup::default());
    let mut graph = Graph::start(&format!(
        "[sources.dev]\ntype = \"mqtt\"\nurl = \"{}\"\ntopics = [\"dev/#\"]\npayload = \"raw\"\n\n\
         [outputs.back]\ntype = \"seen\"\ninputs = [\"dev\"]\n",
        broker.url()
    ))
    .await;
    graph.subscribed("dev", 1).await;
    broker.publish("dev/button/1", b"pressed", &["-q", "1"]);
    broker.publish("dev/temp", b"21.5", &["-q", "0"]);
    broker.publish(
        "dev/bin",
        &[0x00, 0x9f, 0xff, 0x10],
        &["-q", "1", "-V", "mqttv5"],
    );
    broker.publish(
        "dev/json",
        br#"{"type":"not parsed in raw mode"}"#,
        &["-q", "1"],
    );
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(graph.next().await);
    }
    for s in &got {
        assert_eq!(s.kind, "mqtt.message");
        assert_eq!(s.source, "mqtt:dev");
        patchbay_testkit::validity::assert_valid(s);
    }
    let payloads: Vec<_> = got
        .iter()
        .map(|s| serde_json::Value::Object(s.payload.clone()))
        .collect();
    assert_eq!(
        payloads,
        [
            json!({"topic": "dev/button/1", "payload": "pressed"}),
            json!({"topic": "dev/temp", "payload": "21.5"}),
            json!({"topic": "dev/bin", "payload": "AJ//EA==", "encoding": "base64"}),
            json!({"topic": "dev/json", "payload": "{\"type\":\"not parsed in raw mode\"}"}),
        ]
    );
    let report = graph.stop().await;
    assert_eq!(final_of(&report, "dev").bad_input, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_pick_exactly_their_topics() {
    let broker = Mosquitto::start(Setup::default());
    for version in ["3.1.1", "5"] {
        let mut graph = Graph::start(&format!(
            "[sources.dev]\ntype = \"mqtt\"\nurl = \"{}\"\nversion = \"{version}\"\n\
             topics = [\"home/+/button\", \"esp32/#\"]\npayload = \"raw\"\nclean_session = true\n\n\
             [outputs.back]\ntype = \"seen\"\ninputs = [\"dev\"]\n",
            broker.url()
        ))
        .await;
        graph.subscribed("dev", 2).await;
        let topics = [
            ("home/kitchen/button", true),
            ("home/kitchen/lamp", false),
            ("home/a/b/button", false),
            ("home/button", false),
            ("esp32", true),
            ("esp32/x/y", true),
            ("esp33/x", false),
            ("other", false),
            ("esp32/done", true),
        ];
        for (topic, _) in topics {
            broker.publish(topic, topic.as_bytes(), &["-q", "1"]);
        }
        let want: Vec<&str> = topics.iter().filter(|(_, m)| *m).map(|(t, _)| *t).collect();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let s = graph.next().await;
            got.push(s.payload["topic"].as_str().unwrap_or_default().to_owned());
        }
        assert_eq!(got, want, "{version}");
        // The marker came last and published after all the others: nothing else is due.
        assert!(
            graph.seen.try_recv().is_err(),
            "{version}: nothing else arrived"
        );
        let report = graph.stop().await;
        assert_eq!(final_of(&report, "dev").dropped, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_states_reach_a_late_subscriber() {
    let broker = Mosquitto::start(Setup::default());
    // The lamp pipeline's output: each agent's last state, retained, raw.
    let out = Graph::start(&format!(
        "[outputs.lamp]\ntype = \"mqtt\"\ninputs = [\"feed\"]\nurl = \"{}\"\n\
         topic = \"agents/{{payload.agentId}}/state\"\npayload = \"raw\"\nvalue = \"payload.to\"\nretain = true\n",
        broker.url()
    ))
    .await;
    let states = [
        ("a", "idle", "thinking"),
        ("b", "idle", "acting"),
        ("a", "thinking", "waiting"),
    ];
    for (agent, from, to) in states {
        let s = Signal::new(
            "agent_state_change",
            "test:agents",
            object! {"agentId" => agent, "from" => from, "to" => to},
        );
        out.feed.send(s).await.expect("the graph takes it");
    }
    wait_for("the three states acknowledged", || {
        out.component("lamp").sent == 3
    })
    .await;
    let report = out.stop().await;
    assert_eq!(final_of(&report, "lamp").sent, 3);

    // A lamp that connects afterwards gets each agent's last state at once.
    for version in ["3.1.1", "5"] {
        let mut lamp = Graph::start(&format!(
            "[sources.lamp]\ntype = \"mqtt\"\nurl = \"{}\"\nversion = \"{version}\"\ntopics = [\"agents/+/state\"]\n\
             payload = \"raw\"\n\n[outputs.back]\ntype = \"seen\"\ninputs = [\"lamp\"]\n",
            broker.url()
        ))
        .await;
        let mut got = BTreeMap::new();
        while got.len() < 2 {
            let s = lamp.next().await;
            assert_eq!(s.meta("mqtt"), Some(&json!({"retained": true})), "{s:?}");
            got.insert(
                s.payload["topic"].as_str().unwrap_or_default().to_owned(),
                s.payload["payload"].as_str().unwrap_or_default().to_owned(),
            );
        }
        assert_eq!(
            got,
            BTreeMap::from([
                ("agents/a/state".to_owned(), "waiting".to_owned()),
                ("agents/b/state".to_owned(), "acting".to_owned()),
            ]),
            "{version}"
        );
        lamp.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_payloads_are_counted_and_the_source_serves_on() {
    let broker = Mosquitto::start(Setup::default());
    let mut graph = Graph::start(&format!(
        "[sources.bus]\ntype = \"mqtt\"\nurl = \"{}\"\ntopics = [\"bus/#\"]\n\n\
         [outputs.back]\ntype = \"seen\"\ninputs = [\"bus\"]\n",
        broker.url()
    ))
    .await;
    graph.subscribed("bus", 1).await;
    broker.publish("bus/a", b"not json at all", &["-q", "1"]);
    broker.publish("bus/b", &[0xff, 0xfe, b'{', b'}'], &["-q", "1"]);
    broker.publish("bus/c", br#"{"type": 5}"#, &["-q", "0"]);
    broker.publish("bus/d", br#"{"type":"ok","payload":{"n":1}}"#, &["-q", "1"]);
    let mut errors = Vec::new();
    for _ in 0..3 {
        let s = graph.next().await;
        assert_eq!(s.kind, "error", "{s:?}");
        patchbay_testkit::validity::assert_valid(&s);
        errors.push(s.payload["message"].as_str().unwrap_or_default().to_owned());
    }
    for (error, topic) in errors.iter().zip(["bus/a", "bus/b", "bus/c"]) {
        assert!(
            error.starts_with(&format!("message on `{topic}`: ")),
            "{error}"
        );
    }
    assert!(errors[1].contains("not UTF-8"), "{errors:?}");
    let ok = graph.next().await;
    assert_eq!((ok.kind.as_str(), &ok.payload["n"]), ("ok", &json!(1)));
    let bus = graph.component("bus");
    assert_eq!(bus.bad_input, 3, "{bus:?}");
    assert_eq!(bus.state, HealthState::Ok, "{bus:?}");
    // The bad messages were acknowledged (taken): a reconnect does not bring them back.
    graph.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_skipped_counted_and_acknowledged() {
    let broker = Mosquitto::start(Setup::default());
    let mut graph = Graph::start(&format!(
        "[sources.bus]\ntype = \"mqtt\"\nurl = \"{}\"\ntopics = [\"big/#\"]\npayload = \"raw\"\nmax_packet_size = 2048\n\n\
         [outputs.back]\ntype = \"seen\"\ninputs = [\"bus\"]\n",
        broker.url()
    ))
    .await;
    graph.subscribed("bus", 1).await;
    broker.publish("big/one", &[b'x'; 100_000], &["-q", "1"]);
    broker.publish("big/two", b"small", &["-q", "1"]);
    let s = graph.next().await;
    assert_eq!(s.payload["topic"], "big/two");
    let bus = graph.component("bus");
    assert_eq!(bus.bad_input, 1, "{bus:?}");
    assert!(
        bus.last_error
            .unwrap_or_default()
            .contains("over max_packet_size"),
        "named"
    );
    graph.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtts_with_a_private_ca() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("broker key");
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("broker params")
        .signed_by(&key, &issuer)
        .expect("broker cert");
    let broker = Mosquitto::start(Setup {
        tls: Some((cert.pem(), key.serialize_pem())),
        ..Setup::default()
    });
    let ca_file = broker.file("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).expect("write the CA");
    let url = format!("mqtts://localhost:{}", broker.port);
    let extra = format!("ca_file = \"{}\"", ca_file.display());
    let mut graph = Graph::start(&round_trip_config(&url, "5", 1, "tls", &extra)).await;
    graph.subscribed("in", 1).await;
    let s = Signal::new("tick", "test:tls", object! {"secure" => true});
    graph.feed.send(s.clone()).await.expect("taken");
    let back = graph.next().await;
    assert_eq!(back.id, s.id);
    graph.stop().await;

    // Without the CA the broker's certificate is not trusted: the connection fails and
    // says so (and retries: a certificate can be fixed while patchbay runs).
    let graph = Graph::start(&round_trip_config(
        &url,
        "5",
        1,
        "untrusted",
        "max_attempts = 1\nbackoff_initial_ms = 10",
    ))
    .await;
    wait_for("the untrusted broker refused", || {
        graph.component("out").state == HealthState::Failed
    })
    .await;
    let out = graph.component("out");
    let error = out.last_error.clone().unwrap_or_default();
    assert!(error.contains("TLS with mqtts://localhost"), "{error}");
    graph.stop().await;
}
