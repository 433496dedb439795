//! Signals per second through `when` → `map` → `throttle` on already-decoded signals, on
//! one core: once with operator tables and dot-path mappings, once with jq expressions.
//!
//! Run: `cargo bench --bench filter_chain`. Results go to BENCHMARKS.md.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use patchbay_graph::engine::Engine;
use patchbay_graph::runtime::telemetry_for;
use patchbay_graph::{SourceText, compile};
use patchbay_signal::{SharedSignal, Signal, object};

/// The allocator the `patchbay` binary runs with (src/main.rs), so that the figures are
/// the binary's.
#[global_allocator]
static ALLOCATOR: patchbay_allocator::MiMalloc = patchbay_allocator::MiMalloc;

const OPERATORS: &str = r#"
[sources.in]
type = "stdin"
[filters.keep]
type = "when"
inputs = ["in"]
when = { type = "midi.control_change", "payload.controller" = { lt = 64 } }
[filters.rename]
type = "map"
inputs = ["keep"]
mappings = [{ from = "payload.value", to = "payload.level" }]
set_type = "fader.level"
[filters.rate]
type = "throttle"
inputs = ["rename"]
interval_ms = 10
key = "payload.controller"
clock = "event"
[outputs.out]
type = "stdout"
inputs = ["rate"]
"#;

const JQ: &str = r#"
[sources.in]
type = "stdin"
[filters.keep]
type = "when"
inputs = ["in"]
expr = '.type == "midi.control_change" and .payload.controller < 64'
[filters.rename]
type = "map"
inputs = ["keep"]
expr = '.type = "fader.level" | .payload.level = .payload.value | del(.payload.value)'
[filters.rate]
type = "throttle"
inputs = ["rename"]
interval_ms = 10
key = "payload.controller"
clock = "event"
[outputs.out]
type = "stdout"
inputs = ["rate"]
"#;

fn signals(n: usize) -> Vec<SharedSignal> {
    (0..n)
        .map(|i| {
            Arc::new(
                Signal::new(
                    "midi.control_change",
                    "midi:bench",
                    object! {"channel" => 1, "controller" => (i % 100) as u64, "value" => (i % 128) as u64, "port" => "bench"},
                )
                .at(i as i64),
            )
        })
        .collect()
}

fn bench_chain(c: &mut Criterion, name: &str, config: &str) {
    let graph = compile(&[SourceText::new(name, config)], &patchbay::registry())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let input = signals(10_000);
    let mut group = c.benchmark_group("filter_chain");
    group.throughput(Throughput::Elements(input.len() as u64));
    group.bench_function(name, |b| {
        // Each run gets signals of its own, as from a source: nothing else holds them.
        let fresh =
            || -> Vec<SharedSignal> { input.iter().map(|s| Arc::new((**s).clone())).collect() };
        b.iter_batched(
            fresh,
            |signals| {
                let (_, stats) = telemetry_for(&graph);
                let mut engine = Engine::new(&graph.nodes, stats);
                let mut out = 0usize;
                for s in signals {
                    let at = s.timestamp;
                    engine.push(0, s, at, &mut |_, _| out += 1);
                }
                engine.end_all(0, &mut |_, _| out += 1);
                out
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// One filter of the operator chain alone, to see where the time goes.
fn single(filter: &str) -> String {
    let start = OPERATORS.find(&format!("[filters.{filter}]")).unwrap_or(0);
    let rest = &OPERATORS[start..];
    let end = rest[1..].find("\n[").map(|i| i + 1).unwrap_or(rest.len());
    let body = rest[..end]
        .replace("inputs = [\"keep\"]", "inputs = [\"in\"]")
        .replace("inputs = [\"rename\"]", "inputs = [\"in\"]");
    format!(
        "[sources.in]\ntype = \"stdin\"\n{body}\n[outputs.out]\ntype = \"stdout\"\ninputs = [\"{filter}\"]\n"
    )
}

fn chains(c: &mut Criterion) {
    bench_chain(c, "operators", OPERATORS);
    if std::env::var_os("PATCHBAY_BENCH_SINGLE").is_some() {
        for f in ["keep", "rename", "rate"] {
            bench_chain(c, &format!("only_{f}"), &single(f));
        }
    }
    bench_chain(c, "jq", JQ);
}

criterion_group!(benches, chains);
criterion_main!(benches);
