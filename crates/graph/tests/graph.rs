//! The compiler and the engine with minimal test components.

use std::sync::Arc;

use patchbay_graph::engine::Engine;
use patchbay_graph::runtime::telemetry_for;
use patchbay_graph::{
    BoxFuture, ComponentError, Declaration, Diagnostic, DiscoveryExpansion, Emit, Filter,
    FilterSpec, Graph, NodeKind, Options, Output, OutputContext, OutputKind, Port, Registry,
    Source, SourceContext, SourceText, WhenFull,
};
use patchbay_signal::{SharedSignal, Signal};
use serde::{Deserialize, Serialize};

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

/// Sends `keep` signals out of its named output `hit`, the others out of `miss`.
struct SplitFilter;

impl Filter for SplitFilter {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        emit.to(u16::from(signal.kind != "keep"), signal);
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.filter("split", |o: &Options<'_>| {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Empty {}
        let _: Empty = o.parse()?;
        Ok(
            FilterSpec::new(None, || Box::new(SplitFilter) as Box<dyn Filter>)
                .with_ports(vec!["hit".into(), "miss".into()]),
        )
    });
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

/// The options of a `probe` source: stands for a source that `[discovery]` declares; it
/// knows the services `a` and `b`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeConfig {
    service: String,
    every: u64,
}

/// The tests' `[discovery]`: a `local:<service>` probe for each of `services`, feeding the
/// outputs `connect` names.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoveryTable {
    services: Vec<String>,
    #[serde(default)]
    connect: Vec<String>,
}

/// [`registry`] with the `probe` source type and a `[discovery]` expander.
fn with_discovery() -> Registry {
    let mut r = registry();
    r.source(
        "probe",
        |o: &Options<'_>| -> Result<Box<dyn Source>, Diagnostic> {
            let c: ProbeConfig = o.parse()?;
            if c.service != "a" && c.service != "b" {
                return Err(o.error_at("service", format!("unknown service `{}`", c.service)));
            }
            Ok(Box::new(Idle))
        },
    );
    r.discovery(|o: &Options<'_>| {
        let table: DiscoveryTable = o.parse()?;
        let sources = table
            .services
            .iter()
            .map(|s| {
                let options = ProbeConfig {
                    service: s.clone(),
                    every: 5,
                };
                Declaration::new(format!("local:{s}"), "probe", &options)
                    .map_err(|e| o.error(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        Ok(DiscoveryExpansion {
            sources,
            connect: table.connect,
        })
    });
    r
}

fn compile(text: &str) -> Result<Graph, Vec<Diagnostic>> {
    compile_files(&[text], &registry())
}

/// Compiles `texts` as the files `f0.toml`, `f1.toml`… (one text: `g.toml`).
fn compile_files(texts: &[&str], registry: &Registry) -> Result<Graph, Vec<Diagnostic>> {
    let files: Vec<SourceText> = match texts {
        [text] => vec![SourceText::new("g.toml", *text)],
        _ => texts
            .iter()
            .enumerate()
            .map(|(i, t)| SourceText::new(format!("f{i}.toml"), *t))
            .collect(),
    };
    patchbay_graph::compile::compile_with_env(&files, registry, &|_| None)
}

/// Every node as `name (type) <- inputs`, an input as its node's name (`.dropped` for
/// that port).
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
            format!("{} ({}) <- {}", n.name, n.type_name, inputs.join(", "))
        })
        .collect()
}

fn messages(errors: &[Diagnostic]) -> Vec<String> {
    errors.iter().map(|e| e.to_string()).collect()
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
        engine.push(0, s, 0, &mut |o, s| out.push((o, s.kind.to_string())));
    }
    assert_eq!(out, [(4, "other".to_owned()), (3, "keep".to_owned())]);
    engine.end(0, 0, &mut |o, s| out.push((o, s.kind.to_string())));
    assert_eq!(
        out.len(),
        3,
        "the held signal is flushed when its input ends"
    );
    assert_eq!(out[2].0, 3);
    let f = stats[1].snapshot();
    assert_eq!((f.received, f.sent, f.dropped), (3, 2, 1));
}

const SPLIT: &str = r#"
[sources.a]
type = "idle"
[filters.s]
type = "split"
inputs = ["a"]
[outputs.hits]
type = "sink"
inputs = ["s.hit"]
[outputs.misses]
type = "sink"
inputs = ["s.miss"]
"#;

#[test]
fn named_outputs_are_inputs_and_test_taps() {
    let g = compile(&format!(
        r#"{SPLIT}
[[tests]]
name = "split"
inputs = [
  {{ insert_at = "a", signal = {{ type = "keep" }} }},
  {{ insert_at = "a", signal = {{ type = "other" }} }},
]
outputs = [
  {{ extract_from = "s.hit", expect = [{{ type = "keep" }}] }},
  {{ extract_from = "s.miss", expect = [{{ type = "other" }}] }},
]
"#
    ))
    .unwrap();
    assert_eq!(
        shape(&g),
        [
            "a (idle) <- ",
            "s (split) <- a",
            "hits (sink) <- s.<0>",
            "misses (sink) <- s.<1>"
        ]
    );
    let results = patchbay_graph::testing::run_tests(&g);
    assert!(results[0].passed(), "{:?}", results[0].failures);

    let (_, stats) = telemetry_for(&g);
    let mut engine = Engine::new(&g.nodes, stats.clone());
    let mut out: Vec<(usize, String)> = Vec::new();
    for kind in ["keep", "other", "keep"] {
        let s = Arc::new(Signal::new(kind, "t", Default::default()));
        engine.push(0, s, 0, &mut |o, s| out.push((o, s.kind.to_string())));
    }
    let (hits, misses) = (2, 3);
    assert_eq!(
        out,
        [
            (hits, "keep".to_owned()),
            (misses, "other".to_owned()),
            (hits, "keep".to_owned())
        ]
    );
    let s = stats[1].snapshot();
    assert_eq!((s.received, s.sent, s.dropped), (3, 3, 0));
}

#[test]
fn named_outputs_are_checked() {
    let text = SPLIT
        .replace("[\"s.hit\"]", "[\"s\"]")
        .replace("[\"s.miss\"]", "[\"s.mis\"]");
    let errs = messages(&compile(&text).unwrap_err());
    assert_eq!(
        errs,
        [
            "g.toml:9:11: hits: `s` sends its signals out of its named outputs: use `s.hit`, `s.miss`",
            "g.toml:12:11: misses: `s` has no output `mis`: its outputs are `s.hit`, `s.miss` and `s.dropped`",
        ]
    );
    let errs = messages(
        &compile(&format!(
            "{SPLIT}\n[[tests]]\nname = \"t\"\ninputs = []\noutputs = [{{ extract_from = \"s.hits\", expect = [] }}]\n"
        ))
        .unwrap_err(),
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].ends_with(
            "test `t`: `s` has no output `hits`: its outputs are `s.hit`, `s.miss` and `s.dropped`"
        ),
        "{errs:?}"
    );
}

const WITH_DISCOVERY: &str = r#"[discovery]
services = ["a", "b"]
connect = ["o", "t"]
[sources.s]
type = "idle"
[outputs.o]
type = "sink"
inputs = ["s"]
[outputs.t]
type = "twoway"
inputs = ["local:b"]
"#;

#[test]
fn discovery_declares_sources_after_the_written_ones_feeding_connect() {
    let g = compile_files(&[WITH_DISCOVERY], &with_discovery()).unwrap();
    assert_eq!(
        shape(&g),
        [
            "s (idle) <- ",
            "local:a (probe) <- ",
            "local:b (probe) <- ",
            "t.inbound (inbound) <- ",
            "o (sink) <- s, local:a, local:b",
            "t (twoway) <- local:b, local:a",
        ]
    );
    assert_eq!(
        g.nodes[1].location.to_string(),
        "g.toml:1:2",
        "at [discovery]"
    );
}

#[test]
fn an_expansion_compiles_like_the_declarations_it_stands_for() {
    let written = r#"[sources.s]
type = "idle"
[sources."local:a"]
type = "probe"
service = "a"
every = 5
[sources."local:b"]
type = "probe"
service = "b"
every = 5
[outputs.o]
type = "sink"
inputs = ["s", "local:a", "local:b"]
[outputs.t]
type = "twoway"
inputs = ["local:b", "local:a"]
"#;
    let expanded = compile_files(&[WITH_DISCOVERY], &with_discovery()).unwrap();
    let written = compile_files(&[written], &with_discovery()).unwrap();
    assert_eq!(shape(&expanded), shape(&written));
}

#[test]
fn what_an_expansion_declares_is_checked_and_reported_at_discovery() {
    let errs = compile_files(
        &["[sources.s]\ntype = \"idle\"\n\n[discovery]\nservices = [\"a\", \"zz\"]\n"],
        &with_discovery(),
    )
    .unwrap_err();
    assert_eq!(
        messages(&errs),
        ["g.toml:4:2: local:zz: unknown service `zz`"]
    );
}

#[test]
fn discovery_errors_keep_their_places() {
    let r = with_discovery();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[
                "[discovery]\nservices = []\n",
                "[discovery]\nservices = [\"a\"]\n",
            ],
            &["f0.toml:1:2: [discovery] is declared twice (also at f1.toml:1:2)"],
        ),
        (
            &["[sources.\"local:a\"]\ntype = \"idle\"\n[discovery]\nservices = [\"a\"]\n"],
            &["g.toml:3:2: discovery: `local:a` is already declared"],
        ),
        (
            &[
                "[sources.s]\ntype = \"idle\"\n[discovery]\nservices = [\"a\"]\nconnect = [\"s\", \"nope\"]\n",
            ],
            &[
                "g.toml:5:12: discovery: `s` is not an output",
                "g.toml:5:17: discovery: `nope` is not an output",
            ],
        ),
        (
            // The output failing to build is reported; `connect` naming it is not.
            &[
                "[outputs.o]\ntype = \"nosuch\"\ninputs = [\"x\"]\n[discovery]\nservices = [\"a\"]\nconnect = [\"o\"]\n",
            ],
            &["g.toml:2:8: o: unknown output type `nosuch`; known: sink, twoway"],
        ),
        (
            &["[discovery]\nservics = [\"a\"]\n"],
            &[
                "g.toml:2:1: discovery: unknown field `servics`, expected `services` or `connect` (did you mean `services`?)",
            ],
        ),
    ];
    for (files, expected) in cases {
        let errs = compile_files(files, &r).unwrap_err();
        assert_eq!(messages(&errs), *expected, "{files:?}");
    }
    // Without an expander, `[discovery]` is no section.
    let errs = compile("[discovery]\nservices = []\n").unwrap_err();
    assert!(
        errs[0].message.starts_with("unknown section `discovery`"),
        "{errs:?}"
    );
}

#[test]
fn a_secret_substituted_into_a_type_is_not_shown_in_its_error() {
    // Found by the `config` fuzz target.
    let config = "[sources.feed]\ntype = \"scts?token=${PB_SECRET_IN_TYPE}\"\n";
    let errors = patchbay_graph::compile::compile_with_env(
        &[SourceText::new("t.toml", config)],
        &registry(),
        &|name| (name == "PB_SECRET_IN_TYPE").then(|| "s3cret".to_owned()),
    )
    .expect_err("an unknown type");
    let text: String = errors.iter().map(ToString::to_string).collect();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains("${PB_SECRET_IN_TYPE}"), "{text}");
}
