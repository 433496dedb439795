//! The compiler and the engine with minimal test components.

use std::sync::Arc;

use patchbay_graph::engine::Engine;
use patchbay_graph::runtime::telemetry_for;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, Emit, Filter, FilterSpec, Graph, NodeKind, Options,
    Output, OutputContext, OutputKind, Registry, Source, SourceContext, SourceText, WhenFull,
};
use patchbay_signal::{SharedSignal, Signal};
use serde::Deserialize;

struct Idle;
impl Source for Idle {
    fn run(self: Box<Self>, _cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async { Ok(()) })
    }
}
impl Output for Idle {
    fn run(self: Box<Self>, _cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Passes signals whose type is `keep`, drops the rest; holds one signal until flushed
/// when `hold = true`.
struct KeepFilter {
    hold: bool,
    held: Option<SharedSignal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeepConfig {
    #[serde(default)]
    hold: bool,
}

impl Filter for KeepFilter {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        if signal.kind != "keep" {
            emit.drop(signal);
        } else if self.hold {
            if let Some(old) = self.held.replace(signal) {
                emit.pass(old);
            }
        } else {
            emit.pass(signal);
        }
    }
    fn flush(&mut self, emit: &mut Emit) {
        if let Some(s) = self.held.take() {
            emit.pass(s);
        }
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.source(
        "idle",
        |o: &Options<'_>| -> Result<Box<dyn Source>, Diagnostic> {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Empty {}
            let _: Empty = o.parse()?;
            Ok(Box::new(Idle))
        },
    );
    r.filter("keep", |o: &Options<'_>| {
        let c: KeepConfig = o.parse()?;
        let hold = c.hold;
        Ok(FilterSpec::new(None, move || {
            Box::new(KeepFilter { hold, held: None }) as Box<dyn Filter>
        }))
    });
    let output = OutputKind {
        build: |_o: &Options<'_>| -> Result<Box<dyn Output>, Diagnostic> { Ok(Box::new(Idle)) },
        inbound: false,
        when_full: WhenFull::Block,
    };
    r.output("sink", output);
    r.output(
        "twoway",
        OutputKind {
            inbound: true,
            ..output
        },
    );
    r
}

fn compile(text: &str) -> Result<Graph, Vec<Diagnostic>> {
    patchbay_graph::compile::compile_with_env(
        &[SourceText::new("g.toml", text)],
        &registry(),
        &|_| None,
    )
}

fn names(graph: &Graph) -> Vec<&str> {
    graph.nodes.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn nodes_are_ordered_and_inbound_sides_exist() {
    let g = compile(
        r#"
[outputs.ui]
type = "twoway"
inputs = ["f", "ui.inbound"]
[filters.f]
type = "keep"
inputs = ["a*"]
[sources.a1]
type = "idle"
[sources.a2]
type = "idle"
"#,
    )
    .unwrap();
    assert_eq!(names(&g), ["a1", "a2", "ui.inbound", "f", "ui"]);
    assert!(matches!(g.nodes[2].kind, NodeKind::Inbound { output: 4 }));
    assert_eq!(g.nodes[3].inputs.len(), 2, "a* matches both sources");
    assert_eq!(g.nodes[4].inputs.len(), 2);
}

#[test]
fn errors_point_at_their_place() {
    let errs = compile(
        "[sources.a]\ntype = \"idle\"\n[filters.f]\ntype = \"keep\"\ninputs = [\"a\", \"g\"]\n[filters.g]\ntype = \"keep\"\ninputs = [\"f.dropped\"]\n[outputs.o]\ntype = \"sink\"\ninputs = [\"o\"]\n",
    )
    .unwrap_err();
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert!(text.iter().any(|e| e.contains("cycle")), "{text:?}");
    assert!(
        text.iter()
            .any(|e| e.starts_with("g.toml:11:11: o: `o` is an output")),
        "{text:?}"
    );
}

#[test]
fn duplicate_names_across_sections() {
    let errs =
        compile("[sources.a]\ntype = \"idle\"\n[filters.a]\ntype = \"keep\"\ninputs = [\"a\"]\n")
            .unwrap_err();
    assert!(
        errs[0]
            .message
            .contains("declared twice (first at g.toml:1:10)"),
        "{errs:?}"
    );
}

#[test]
fn engine_routes_dropped_and_flushes_on_end() {
    let g = compile(
        r#"
[sources.a]
type = "idle"
[filters.f]
type = "keep"
inputs = ["a"]
hold = true
[filters.g]
type = "keep"
inputs = ["f.dropped"]
[outputs.main]
type = "sink"
inputs = ["f"]
[outputs.rest]
type = "sink"
inputs = ["g.dropped"]
"#,
    )
    .unwrap();
    let (_, stats) = telemetry_for(&g);
    let mut engine = Engine::new(&g.nodes, stats.clone());
    let mut out: Vec<(usize, String)> = Vec::new();
    for kind in ["keep", "other", "keep"] {
        let s = Arc::new(Signal::new(kind, "t", Default::default()));
        engine.push(0, s, 0, &mut |o, s| out.push((o, s.kind.clone())));
    }
    assert_eq!(out, [(4, "other".to_owned()), (3, "keep".to_owned())]);
    engine.end(0, 0, &mut |o, s| out.push((o, s.kind.clone())));
    assert_eq!(
        out.len(),
        3,
        "the held signal is flushed when its input ends"
    );
    assert_eq!(out[2].0, 3);
    let f = stats[1].snapshot();
    assert_eq!((f.received, f.sent, f.dropped), (3, 2, 1));
}
