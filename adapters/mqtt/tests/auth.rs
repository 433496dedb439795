//! Password authentication against a real `mosquitto` with a password file (made by
//! `mosquitto_passwd -b`): the right password (and a token, sent as the password) works
//! both ways over MQTT 3.1.1 and 5; a wrong one or none fails at once with a clear error
//! that holds no secret, and the output refuses (and counts) what it is sent.

mod mosquitto;

use mosquitto::{Graph, Mosquitto, Setup, final_of, wait_for};
use patchbay_graph::HealthState;
use patchbay_signal::{Signal, object};

const USER: &str = "lamp";
const PASSWORD: &str = "s3cret-Pa55word";

fn broker() -> Mosquitto {
    Mosquitto::start(Setup {
        users: vec![(USER.into(), PASSWORD.into())],
        ..Setup::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_password_or_token_connects_both_ways() {
    let broker = broker();
    for (version, secret_key) in [("3.1.1", "password"), ("5", "password"), ("5", "token")] {
        let auth = format!("user = \"{USER}\"\n{secret_key} = \"{PASSWORD}\"");
        let prefix = format!("auth{}{secret_key}", version.replace('.', ""));
        let mut graph = Graph::start(&format!(
            "[outputs.out]\ntype = \"mqtt\"\ninputs = [\"feed\"]\nurl = \"{url}\"\nversion = \"{version}\"\n\
             topic = \"{prefix}/{{type}}\"\n{auth}\n\n\
             [sources.in]\ntype = \"mqtt\"\nurl = \"{url}\"\nversion = \"{version}\"\ntopics = [\"{prefix}/#\"]\n{auth}\n\n\
             [outputs.back]\ntype = \"seen\"\ninputs = [\"in\"]\n",
            url = broker.url()
        ))
        .await;
        graph.subscribed("in", 1).await;
        let s = Signal::new("tick", "test:auth", object! {"n" => 1});
        graph.feed.send(s.clone()).await.expect("taken");
        assert_eq!(graph.next().await.id, s.id, "{version} {secret_key}");
        let report = graph.stop().await;
        for name in ["out", "in"] {
            let c = final_of(&report, name);
            assert!(c.last_error.is_none(), "{c:?}");
            assert!(!format!("{c:?}").contains(PASSWORD), "{c:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_at_once_with_a_clear_error_and_no_secret() {
    let broker = broker();
    let wrong = "wr0ng-Secret-value";
    // mosquitto 2.0 answers "not authorized" to a wrong password as to none.
    let bad = format!("user = \"{USER}\"\npassword = \"{wrong}\"");
    for (version, auth, says) in [
        ("3.1.1", bad.clone(), "not authorized"),
        ("5", bad.clone(), "not authorized"),
        ("3.1.1", String::new(), "not authorized"),
        ("5", String::new(), "not authorized"),
    ] {
        let graph = Graph::start(&format!(
            "[outputs.out]\ntype = \"mqtt\"\ninputs = [\"feed\"]\nurl = \"{url}\"\nversion = \"{version}\"\n{auth}\n\n\
             [sources.in]\ntype = \"mqtt\"\nurl = \"{url}\"\nversion = \"{version}\"\n{auth}\n",
            url = broker.url()
        ))
        .await;
        wait_for("both refused", || {
            graph.component("out").state == HealthState::Failed
                && graph.component("in").state == HealthState::Failed
        })
        .await;
        for i in 0..3 {
            let s = Signal::new("tick", "test:auth", object! {"i" => i});
            graph.feed.send(s).await.expect("the graph takes it");
        }
        wait_for("the output refused what it was sent", || {
            graph.component("out").bad_input == 3
        })
        .await;
        let report = graph.stop().await;
        for name in ["out", "in"] {
            let c = final_of(&report, name);
            let error = c.last_error.clone().unwrap_or_default();
            assert!(
                error.contains(&format!(
                    "{} refused the connection: {says}; not retrying",
                    broker.url()
                )),
                "{version} {name}: {error}"
            );
            let shown = format!("{c:?}");
            assert!(
                !shown.contains(wrong) && !shown.contains(PASSWORD),
                "{shown}"
            );
            assert_eq!(
                c.gauges.get("mqtt_connects"),
                Some(&0.0),
                "never connected: {c:?}"
            );
        }
        let out = final_of(&report, "out");
        assert_eq!((out.sent, out.bad_input), (0, 3), "{out:?}");
    }
    assert!(
        broker.log().contains("not authorised"),
        "the broker refused the attempts itself:\n{}",
        broker.log()
    );
}
