//! The runtime's reload by diff, its start barrier and its panic containment, with test
//! components that count how often they are started.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use patchbay_graph::runtime::{Controls, Notice, Reload, RunReport, run_with};
use patchbay_graph::{
    BoxFuture, ComponentError, Emit, Filter, FilterSpec, Graph, Output, OutputContext, Registry,
    Source, SourceContext, SourceText, WhenFull, compile,
};
use patchbay_signal::{SharedSignal, Signal, object};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

/// The feeds test sources read (by channel name; a source takes its receiver when it
/// runs and puts it back when it ends, so that a rebuilt source reads on), the sinks
/// test outputs write, and how often each was started.
#[derive(Default)]
struct Wires {
    feeds: HashMap<String, mpsc::UnboundedReceiver<Signal>>,
    sinks: HashMap<String, mpsc::UnboundedSender<String>>,
    starts: HashMap<String, usize>,
}

static WIRES: Mutex<Option<Wires>> = Mutex::new(None);

fn wires<T>(f: impl FnOnce(&mut Wires) -> T) -> T {
    f(WIRES.lock().unwrap().get_or_insert_with(Wires::default))
}

fn starts(channel: &str) -> usize {
    wires(|w| w.starts.get(channel).copied().unwrap_or(0))
}

fn feed(channel: &str) -> mpsc::UnboundedSender<Signal> {
    let (tx, rx) = mpsc::unbounded_channel();
    wires(|w| w.feeds.insert(channel.into(), rx));
    tx
}

fn sink(channel: &str) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    wires(|w| w.sinks.insert(channel.into(), tx));
    rx
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelOptions {
    channel: String,
    #[serde(default)]
    fail_start: bool,
}

/// Emits what its feed carries; panics on a signal of type `panic`. Endless.
struct Feed(String);

impl Source for Feed {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            wires(|w| *w.starts.entry(self.0.clone()).or_default() += 1);
            let mut rx = loop {
                if let Some(rx) = wires(|w| w.feeds.remove(&self.0)) {
                    break rx;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            // Put the feed back however this ends (a panic included).
            struct Back(String, Option<mpsc::UnboundedReceiver<Signal>>);
            impl Drop for Back {
                fn drop(&mut self) {
                    if let Some(rx) = self.1.take() {
                        wires(|w| w.feeds.insert(self.0.clone(), rx));
                    }
                }
            }
            let mut back = Back(self.0.clone(), None);
            loop {
                let signal = tokio::select! {
                    s = rx.recv() => s,
                    () = cx.shutdown().wait() => None,
                };
                let Some(signal) = signal else { break };
                if signal.kind == "panic" {
                    back.1 = Some(rx);
                    panic!("told to panic");
                }
                if cx.emit(signal).await.is_err() {
                    break;
                }
            }
            back.1 = Some(rx);
            Ok(())
        })
    }
}

/// Writes the type of each signal to its sink, then `end` when it stops. Reports when it
/// has started; with `fail_start`, fails before.
struct Sink(String, bool);

impl Output for Sink {
    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            wires(|w| *w.starts.entry(self.0.clone()).or_default() += 1);
            if self.1 {
                return Err(format!("cannot bind {}: address in use", self.0).into());
            }
            cx.started();
            let tx = wires(|w| w.sinks.get(&self.0).cloned()).expect("sink made");
            while let Some(s) = cx.next().await {
                let _ = tx.send(s.kind.to_string());
                cx.delivered(1);
            }
            let _ = tx.send("end".into());
            Ok(())
        })
    }
}

/// Drops a type it has seen before (state a reload keeps); panics on `boom`.
struct Seen(HashSet<String>);

impl Filter for Seen {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        assert!(signal.kind != "boom", "boom");
        if self.0.insert(signal.kind.to_string()) {
            emit.pass(signal);
        } else {
            emit.drop(signal);
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeenOptions {
    #[allow(dead_code)]
    tag: String,
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.source("feed", |o| {
        let c: ChannelOptions = o.parse()?;
        Ok(Box::new(Feed(c.channel)) as Box<dyn Source>)
    });
    r.output_fn("sink", WhenFull::Block, |o| {
        let c: ChannelOptions = o.parse()?;
        Ok(Box::new(Sink(c.channel, c.fail_start)) as Box<dyn Output>)
    });
    r.filter("seen", |o| {
        let _: SeenOptions = o.parse()?;
        Ok(FilterSpec::new(None, || Box::new(Seen(HashSet::new()))))
    });
    r
}

fn graph(config: &str) -> Graph {
    compile(&[SourceText::new("reload.toml", config)], &registry()).expect("compiles")
}

fn signal(kind: &str) -> Signal {
    Signal::new(kind, "test", object! {})
}

/// A running graph with its controls.
struct Daemon {
    reloads: mpsc::Sender<Reload>,
    notices: mpsc::UnboundedReceiver<Notice>,
    stop: Option<oneshot::Sender<()>>,
    run: tokio::task::JoinHandle<RunReport>,
}

impl Daemon {
    fn start(config: &str) -> Daemon {
        let (reloads, reload_rx) = mpsc::channel(4);
        let (notice_tx, notices) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let graph = graph(config);
        let run = tokio::spawn(run_with(
            graph,
            async {
                let _ = stopped.await;
            },
            Controls {
                reloads: Some(reload_rx),
                notices: Some(notice_tx),
            },
        ));
        Daemon {
            reloads,
            notices,
            stop: Some(stop),
            run,
        }
    }

    async fn reload(&self, config: Result<&str, &str>) -> Result<String, String> {
        let (reply, outcome) = oneshot::channel();
        let graph = config.map(graph).map_err(str::to_owned);
        self.reloads
            .send(Reload {
                graph,
                reply: Some(reply),
            })
            .await
            .expect("running");
        outcome.await.expect("answered")
    }

    async fn stop(mut self) -> RunReport {
        let _ = self.stop.take().expect("once").send(());
        self.run.await.expect("run ends")
    }
}

fn config(feed: &str, tag: &str, outputs: &[&str]) -> String {
    let mut c = format!(
        "[sources.a]\ntype = \"feed\"\nchannel = \"{feed}\"\n\n[filters.d]\ntype = \"seen\"\ntag = \"{tag}\"\ninputs = [\"a\"]\n"
    );
    for o in outputs {
        c.push_str(&format!(
            "\n[outputs.{o}]\ntype = \"sink\"\nchannel = \"{o}\"\ninputs = [\"d\"]\n"
        ));
    }
    c
}

#[tokio::test]
async fn a_reload_keeps_what_is_unchanged_and_rebuilds_what_changed() {
    let tx = feed("r1-feed");
    let mut o1 = sink("r1o1");
    let mut o2 = sink("r1o2");
    let mut d = Daemon::start(&config("r1-feed", "x", &["r1o1"]));
    assert_eq!(d.notices.recv().await, Some(Notice::Ready));

    tx.send(signal("one")).unwrap();
    tx.send(signal("one")).unwrap();
    tx.send(signal("two")).unwrap();
    assert_eq!(o1.recv().await.as_deref(), Some("one"));
    assert_eq!(o1.recv().await.as_deref(), Some("two"));

    // An output added: everything else is kept (the filter remembers `one`).
    let outcome = d
        .reload(Ok(&config("r1-feed", "x", &["r1o1", "r1o2"])))
        .await;
    assert_eq!(
        outcome.as_deref(),
        Ok("3 kept, 0 rebuilt, 1 added, 0 removed")
    );
    tx.send(signal("one")).unwrap();
    tx.send(signal("three")).unwrap();
    assert_eq!(o1.recv().await.as_deref(), Some("three"));
    assert_eq!(o2.recv().await.as_deref(), Some("three"));
    assert_eq!(
        (starts("r1-feed"), starts("r1o1")),
        (1, 1),
        "nothing restarted"
    );

    // A bad config: refused, the graph goes on untouched.
    let refused = d
        .reload(Err("reload.toml:3:1: d: unknown filter type"))
        .await;
    assert!(refused.is_err());
    tx.send(signal("four")).unwrap();
    assert_eq!(o1.recv().await.as_deref(), Some("four"));
    assert_eq!(o2.recv().await.as_deref(), Some("four"));

    // The filter's options changed: rebuilt with empty state; an output removed: drained
    // and ended.
    let outcome = d.reload(Ok(&config("r1-feed", "y", &["r1o1"]))).await;
    assert_eq!(
        outcome.as_deref(),
        Ok("2 kept, 1 rebuilt, 0 added, 1 removed")
    );
    assert_eq!(o2.recv().await.as_deref(), Some("end"));
    tx.send(signal("one")).unwrap();
    assert_eq!(o1.recv().await.as_deref(), Some("one"));

    // The source's options changed: rebuilt, and the new one reads on.
    let tx2 = feed("r1-feed-2");
    let outcome = d.reload(Ok(&config("r1-feed-2", "y", &["r1o1"]))).await;
    assert_eq!(
        outcome.as_deref(),
        Ok("2 kept, 1 rebuilt, 0 added, 0 removed")
    );
    tx2.send(signal("five")).unwrap();
    assert_eq!(o1.recv().await.as_deref(), Some("five"));
    assert_eq!(starts("r1o1"), 1, "the output kept running");

    let report = d.stop().await;
    let config = report.telemetry.config();
    assert_eq!(config.generation, 4, "three reloads applied");
    let last = config.last_reload.expect("recorded");
    assert!(last.ok);
    let o = report.telemetry.component("r1o1").expect("o1");
    assert_eq!(o.sent, 6, "one two three four one five");
    assert!(report.telemetry.component("r1o2").is_none(), "removed");
    assert!(report.failures.is_empty());
    assert_eq!(o1.recv().await.as_deref(), Some("end"));
}

#[tokio::test]
async fn a_panicking_source_is_contained_reported_and_rebuilt_by_a_reload() {
    let tx = feed("r2-feed");
    let mut out = sink("r2o");
    let cfg = config("r2-feed", "x", &["r2o"]);
    let mut d = Daemon::start(&cfg);
    assert_eq!(d.notices.recv().await, Some(Notice::Ready));
    tx.send(signal("before")).unwrap();
    assert_eq!(out.recv().await.as_deref(), Some("before"));

    tx.send(signal("panic")).unwrap();
    assert_eq!(d.notices.recv().await, Some(Notice::Panicked("a".into())));

    let outcome = d.reload(Ok(&cfg)).await;
    assert_eq!(
        outcome.as_deref(),
        Ok("2 kept, 1 rebuilt, 0 added, 0 removed")
    );
    tx.send(signal("after")).unwrap();
    assert_eq!(out.recv().await.as_deref(), Some("after"));
    assert_eq!(starts("r2-feed"), 2);

    let report = d.stop().await;
    let a = report.telemetry.component("a").expect("a");
    assert_eq!(a.panics, 1, "the rebuilt source keeps the counters");
    assert!(a.last_error.unwrap_or_default().contains("told to panic"));
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(report.failures[0].starts_with("a: panicked"));
}

#[tokio::test]
async fn a_panicking_filter_loses_one_signal_and_starts_again() {
    let tx = feed("r3-feed");
    let mut out = sink("r3o");
    let mut d = Daemon::start(&config("r3-feed", "x", &["r3o"]));
    assert_eq!(d.notices.recv().await, Some(Notice::Ready));
    for kind in ["x", "boom", "x", "y"] {
        tx.send(signal(kind)).unwrap();
    }
    // `x` passes again: the filter restarted with empty state.
    for kind in ["x", "x", "y"] {
        assert_eq!(out.recv().await.as_deref(), Some(kind));
    }
    let report = d.stop().await;
    let filter = report.telemetry.component("d").expect("d");
    assert_eq!(filter.panics, 1);
    assert!(filter.last_error.unwrap_or_default().contains("boom"));
}

#[tokio::test]
async fn a_component_that_cannot_start_stops_the_graph_with_its_reason() {
    let _tx = feed("r4-feed");
    let _out = sink("r4o");
    let cfg = format!(
        "{}\n[outputs.bad]\ntype = \"sink\"\nchannel = \"r4bad\"\nfail_start = true\ninputs = [\"a\"]\n",
        config("r4-feed", "x", &["r4o"])
    );
    let mut d = Daemon::start(&cfg);
    let notice = d.notices.recv().await.expect("a notice");
    assert_eq!(
        notice,
        Notice::StartFailed("bad: cannot bind r4bad: address in use".into())
    );
    // The graph stops by itself.
    let report = d.run.await.expect("ends");
    assert_eq!(
        report.start_failure.as_deref(),
        Some("bad: cannot bind r4bad: address in use")
    );
}

/// Reports itself started and ends at once (a short file).
struct Quick;

impl Source for Quick {
    fn is_finite(&self) -> bool {
        true
    }

    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            cx.started();
            let _ = cx.emit(signal("only")).await;
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_starts_and_ends_at_once_is_no_start_failure() {
    // Its end (with its signals) and its `started` report travel two channels: whichever
    // arrives first, it started.
    let mut r = registry();
    r.source("quick", |_| Ok(Box::new(Quick) as Box<dyn Source>));
    let mut out = sink("r5o");
    let config = "[sources.q]\ntype = \"quick\"\n\n[outputs.r5o]\ntype = \"sink\"\nchannel = \"r5o\"\ninputs = [\"q\"]\n";
    for _ in 0..50 {
        let graph = compile(&[SourceText::new("quick.toml", config)], &r).expect("compiles");
        let (notices, mut heard) = mpsc::unbounded_channel();
        let report = run_with(
            graph,
            std::future::pending(),
            Controls {
                reloads: None,
                notices: Some(notices),
            },
        )
        .await;
        assert_eq!(report.start_failure, None);
        assert_eq!(heard.recv().await, Some(Notice::Ready));
        assert_eq!(out.recv().await.as_deref(), Some("only"));
        assert_eq!(out.recv().await.as_deref(), Some("end"));
    }
}
