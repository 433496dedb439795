//! Embedding a graph in a program: a source fed from a channel, an output that delivers
//! to a channel, and a graph running on its own task until asked to stop.
//!
//! A program that uses patchbay as a library (or a test that drives a transport in
//! process) registers its own ends of the graph under type names that its config uses:
//!
//! ```
//! use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
//! use patchbay_signal::{Signal, object};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut registry = Registry::new();
//! let feed = ChannelSource::register(&mut registry, "feed", 64);
//! let mut seen = ChannelOutput::register(&mut registry, "seen", 64);
//! let config = "[sources.app]\ntype = \"feed\"\n\n[outputs.back]\ntype = \"seen\"\ninputs = [\"app\"]\n";
//! let graph = compile(&[SourceText::new("app.toml", config)], &registry).unwrap();
//! drop(registry); // it holds a sender of `seen`: dropped, `seen` ends with the graph
//! let running = RunningGraph::spawn(graph);
//! feed.send(Signal::new("app.hello", "app", object! {})).await.unwrap();
//! assert_eq!(seen.recv().await.unwrap().kind, "app.hello");
//! drop(feed); // the end of the input: the graph drains and ends
//! assert!(seen.recv().await.is_none());
//! running.wait().await.unwrap();
//! # }
//! ```

use patchbay_signal::{SharedSignal, Signal};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinError, JoinHandle};

use crate::compile::Graph;
use crate::component::{BoxFuture, ComponentError, Output, OutputContext, Source, SourceContext};
use crate::queue::WhenFull;
use crate::registry::Registry;
use crate::runtime::{RunReport, run};
use crate::telemetry::ComponentStats;

/// A source that emits the signals a program sends on a channel.
///
/// It ends when every sender is dropped (so a graph whose sources all end drains and
/// stops on its own), or at shutdown, after emitting what was sent before it. The channel is bounded: when the graph cannot take
/// more, the program's `send` waits (`try_send` says the channel is full, `blocking_send`
/// serves code outside the runtime).
#[derive(Debug)]
pub struct ChannelSource {
    signals: mpsc::Receiver<Signal>,
}

impl ChannelSource {
    /// A source emitting what arrives on `signals`.
    pub fn new(signals: mpsc::Receiver<Signal>) -> Self {
        ChannelSource { signals }
    }

    /// Registers `type_name` as a source type fed from a new channel holding up to
    /// `capacity` signals (at least 1), and returns the channel's sending end. The
    /// receiving end goes to the first source of that type the registry builds: a config
    /// may use the type once.
    pub fn register(
        registry: &mut Registry,
        type_name: &'static str,
        capacity: usize,
    ) -> mpsc::Sender<Signal> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        // The builder is shared (`Fn`) and may run more than once; the receiver can be
        // handed out only once.
        let rx = std::sync::Mutex::new(Some(rx));
        registry.source(type_name, move |options| {
            let rx = rx.lock().ok().and_then(|mut rx| rx.take()).ok_or_else(|| {
                options.error(format!(
                    "a `{type_name}` source is fed from one channel: it is used once already"
                ))
            })?;
            Ok(Box::new(ChannelSource::new(rx)) as Box<dyn Source>)
        });
        tx
    }
}

impl Source for ChannelSource {
    fn is_finite(&self) -> bool {
        true
    }

    fn run(mut self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            loop {
                let signal = tokio::select! {
                    signal = self.signals.recv() => signal,
                    () = cx.shutdown().wait() => break,
                };
                let Some(signal) = signal else { return Ok(()) };
                if cx.emit(signal).await.is_err() {
                    return Ok(());
                }
            }
            // Shutdown: the channel takes no more, but what the program sent before it is
            // accepted and goes through the graph.
            self.signals.close();
            while let Some(signal) = self.signals.recv().await {
                if cx.emit(signal).await.is_err() {
                    break;
                }
            }
            Ok(())
        })
    }
}

/// An output that delivers every signal it receives to a program's channel.
///
/// The channel is bounded: when the program reads late, the output waits, its queue fills
/// and the queue's `when_full` decides (by default the graph waits too, so nothing is
/// lost). A signal the output cannot deliver because the receiver is gone is counted as
/// dropped.
#[derive(Debug, Clone)]
pub struct ChannelOutput {
    signals: mpsc::Sender<SharedSignal>,
}

impl ChannelOutput {
    /// An output delivering to `signals`.
    pub fn new(signals: mpsc::Sender<SharedSignal>) -> Self {
        ChannelOutput { signals }
    }

    /// Registers `type_name` as an output type delivering to a new channel holding up to
    /// `capacity` signals (at least 1), and returns the channel's receiving end. Every
    /// output of that type delivers to it; its queue blocks when full unless the config
    /// says otherwise. The receiver ends once the outputs have ended and the registry
    /// (which keeps a sender to build them) is dropped.
    pub fn register(
        registry: &mut Registry,
        type_name: &'static str,
        capacity: usize,
    ) -> mpsc::Receiver<SharedSignal> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        registry.output_fn(type_name, WhenFull::Block, move |_| {
            Ok(Box::new(ChannelOutput::new(tx.clone())) as Box<dyn Output>)
        });
        rx
    }
}

impl Output for ChannelOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            while let Some(signal) = cx.next().await {
                match self.signals.send(signal).await {
                    Ok(()) => cx.delivered(1),
                    Err(_) => ComponentStats::add(&cx.stats().dropped, 1),
                }
            }
            Ok(())
        })
    }
}

/// A graph running on its own tokio task: [`runtime::run`](crate::runtime::run) with a
/// handle to stop it and to get its [`RunReport`].
///
/// Dropping the handle stops the graph too (it drains on its task, unwatched).
#[derive(Debug)]
pub struct RunningGraph {
    stop: oneshot::Sender<()>,
    task: JoinHandle<RunReport>,
}

impl RunningGraph {
    /// Starts `graph` on a new task of the current tokio runtime (panics outside one, as
    /// `tokio::spawn` does).
    pub fn spawn(graph: Graph) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(graph, async move {
            // A send and a dropped sender both stop the graph.
            let _ = stopped.await;
        }));
        RunningGraph { stop, task }
    }

    /// Asks the graph to stop (its sources stop, then it drains for at most
    /// `runtime.shutdown_timeout_ms`) and waits for its report.
    pub async fn stop(self) -> Result<RunReport, JoinError> {
        let _ = self.stop.send(());
        self.task.await
    }

    /// Waits for a graph that ends on its own and for its report: one whose sources are all
    /// finite (like [`ChannelSource`]) and have ended. A graph with an endless source or a
    /// two-way output never ends on its own: [`stop`](Self::stop) it.
    pub async fn wait(self) -> Result<RunReport, JoinError> {
        let RunningGraph { stop, task } = self;
        let report = task.await;
        drop(stop);
        report
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use patchbay_signal::object;

    use super::*;
    use crate::compile::compile;
    use crate::config::SourceText;
    use crate::filter::{Emit, Filter, FilterSpec};
    use crate::telemetry::HealthState;

    const GUARD: Duration = Duration::from_secs(10);

    /// Passes signals of type `keep`, drops the rest.
    struct Keep;
    impl Filter for Keep {
        fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
            if signal.kind == "keep" {
                emit.pass(signal);
            } else {
                emit.drop(signal);
            }
        }
    }

    /// `feed → keep → seen`, with the registry dropped so that `seen` ends with the graph;
    /// both channels hold all that a test sends before it reads.
    fn start(
        extra: &str,
    ) -> (
        mpsc::Sender<Signal>,
        mpsc::Receiver<SharedSignal>,
        RunningGraph,
    ) {
        let mut registry = Registry::new();
        let feed = ChannelSource::register(&mut registry, "feed", 1024);
        let seen = ChannelOutput::register(&mut registry, "seen", 1024);
        registry.filter("keep", |_| {
            Ok(FilterSpec::new(None, || Box::new(Keep) as Box<dyn Filter>))
        });
        let config = format!(
            "[sources.app]\ntype = \"feed\"\n\n[filters.kept]\ntype = \"keep\"\ninputs = [\"app\"]\n\n[outputs.back]\ntype = \"seen\"\ninputs = [\"kept\"]\n{extra}"
        );
        let graph = compile(&[SourceText::new("embed.toml", config)], &registry)
            .unwrap_or_else(|e| panic!("{e:?}"));
        (feed, seen, RunningGraph::spawn(graph))
    }

    fn signal(kind: &str, i: u64) -> Signal {
        Signal::new(kind, "test", object! {"i" => i})
    }

    async fn all(mut seen: mpsc::Receiver<SharedSignal>) -> Vec<SharedSignal> {
        let mut got = Vec::new();
        while let Some(s) = tokio::time::timeout(GUARD, seen.recv())
            .await
            .expect("the output ends")
        {
            got.push(s);
        }
        got
    }

    #[tokio::test]
    async fn the_end_of_the_input_drains_everything_through_the_graph() {
        let (feed, seen, running) = start("");
        for i in 0..1000 {
            let kind = if i % 2 == 0 { "keep" } else { "drop" };
            feed.send(signal(kind, i))
                .await
                .expect("the source is running");
        }
        drop(feed);
        let got = all(seen).await;
        let numbers: Vec<u64> = got
            .iter()
            .map(|s| s.payload["i"].as_u64().expect("i"))
            .collect();
        assert_eq!(numbers, (0..1000).step_by(2).collect::<Vec<u64>>());
        assert!(got.iter().all(|s| s.kind == "keep"));

        let report = tokio::time::timeout(GUARD, running.wait())
            .await
            .expect("the graph ends on its own")
            .expect("the graph task");
        let of = |name: &str| report.telemetry.component(name).expect(name);
        assert_eq!(of("app").sent, 1000);
        assert_eq!(of("app").state, HealthState::Stopped);
        assert_eq!(of("back").sent, 500);
        assert_eq!(of("back").dropped, 0);
    }

    #[tokio::test]
    async fn stop_ends_a_graph_whose_input_is_still_open() {
        let (feed, mut seen, running) = start("");
        feed.send(signal("keep", 1))
            .await
            .expect("the source is running");
        let first = tokio::time::timeout(GUARD, seen.recv())
            .await
            .expect("a signal arrives")
            .expect("the output is running");
        assert_eq!(first.payload["i"], 1);
        let report = tokio::time::timeout(GUARD, running.stop())
            .await
            .expect("the graph stops")
            .expect("the graph task");
        assert!(report.drained);
        assert!(
            tokio::time::timeout(GUARD, seen.recv())
                .await
                .expect("the output ends")
                .is_none()
        );
        // The source has let go of its channel.
        assert!(feed.send(signal("keep", 2)).await.is_err());
    }

    #[tokio::test]
    async fn what_was_sent_before_a_stop_goes_through() {
        let (feed, seen, running) = start("");
        for i in 0..100 {
            feed.send(signal("keep", i))
                .await
                .expect("the source is running");
        }
        let report = tokio::time::timeout(GUARD, running.stop())
            .await
            .expect("the graph stops")
            .expect("the graph task");
        assert_eq!(all(seen).await.len(), 100);
        assert_eq!(report.telemetry.component("back").expect("stats").sent, 100);
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_graph() {
        let (_feed, seen, running) = start("");
        drop(running);
        assert!(all(seen).await.is_empty());
    }

    #[tokio::test]
    async fn a_dropped_receiver_counts_what_the_output_could_not_deliver() {
        let (feed, seen, running) = start("");
        drop(seen);
        feed.send(signal("keep", 1))
            .await
            .expect("the source is running");
        drop(feed);
        let report = running.wait().await.expect("the graph task");
        let back = report.telemetry.component("back").expect("stats");
        assert_eq!((back.sent, back.dropped), (0, 1));
    }

    #[test]
    fn a_channel_source_feeds_one_source_only() {
        let mut registry = Registry::new();
        let _feed = ChannelSource::register(&mut registry, "feed", 1);
        let _seen = ChannelOutput::register(&mut registry, "seen", 1);
        let config = "[sources.a]\ntype = \"feed\"\n\n[sources.b]\ntype = \"feed\"\n\n[outputs.back]\ntype = \"seen\"\ninputs = [\"a\", \"b\"]\n";
        let Err(errors) = compile(&[SourceText::new("twice.toml", config)], &registry) else {
            panic!("the second source cannot be built");
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0]
                .message
                .contains("b: a `feed` source is fed from one channel"),
            "{errors:?}"
        );
    }
}
