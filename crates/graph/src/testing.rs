//! `patchbay test`: runs the `[[tests]]` written in a config on the graph's filters.
//!
//! Like Vector's config unit tests: signals are inserted at nodes and what comes out of
//! other nodes is compared with what is expected. Time is virtual: each inserted signal's
//! `timestamp` is the wall clock too, and the end of the inputs flushes every filter, so a
//! test gives the same result on any machine.

use std::collections::BTreeMap;
use std::sync::Arc;

use patchbay_signal::normalize::Normalizer;
use patchbay_signal::path::json_eq;
use serde_json::Value;

use crate::compile::{Graph, NodeKind, TestCase};
use crate::engine::Engine;
use crate::filter::Port;
use crate::telemetry::{ComponentStats, Role};

/// The result of one test.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// The test's name.
    pub name: String,
    /// Why it failed (empty when it passed), each with a diff of expected and actual.
    pub failures: Vec<String>,
}

impl TestResult {
    /// Whether the test passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs every test of a graph.
pub fn run_tests(graph: &Graph) -> Vec<TestResult> {
    graph.tests.iter().map(|t| run_test(graph, t)).collect()
}

fn find(graph: &Graph, name: &str) -> Option<(usize, Port)> {
    let by_name: BTreeMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    if let Some(&i) = by_name.get(name) {
        return Some((i, Port::Main));
    }
    let (base, port) = name.rsplit_once('.')?;
    let &i = by_name.get(base)?;
    match (&graph.nodes[i].kind, port) {
        (_, "dropped") => Some((i, Port::Dropped)),
        (NodeKind::Filter(spec), _) => spec.port(port).map(|p| (i, p)),
        _ => None,
    }
}

/// Runs one test.
pub fn run_test(graph: &Graph, test: &TestCase) -> TestResult {
    let stats = graph
        .nodes
        .iter()
        .map(|n| Arc::new(ComponentStats::new(&n.name, &n.type_name, Role::Filter)))
        .collect();
    let mut engine = Engine::new(&graph.nodes, stats);
    let mut failures = Vec::new();
    let taps: Vec<Option<usize>> = test
        .outputs
        .iter()
        .map(|o| find(graph, &o.extract_from).map(|(n, p)| engine.tap(n, p)))
        .collect();
    let mut last = 0;
    for input in &test.inputs {
        let Some((node, _)) = find(graph, &input.insert_at) else {
            failures.push(format!("unknown node `{}`", input.insert_at));
            continue;
        };
        let mut value = input.signal.clone();
        if let Value::Object(o) = &mut value {
            o.entry("timestamp").or_insert(Value::from(last));
        }
        let signal = Normalizer::new(format!("test:{}", input.insert_at))
            .from_value(value)
            .into_signal();
        last = signal.timestamp;
        engine.inject(node, Arc::new(signal), last, &mut |_, _| {});
    }
    engine.end_all(last, &mut |_, _| {});
    for (output, tap) in test.outputs.iter().zip(taps) {
        let Some(tap) = tap else {
            failures.push(format!("unknown node `{}`", output.extract_from));
            continue;
        };
        let actual: Vec<Value> = engine.tapped(tap).iter().map(|s| s.to_value()).collect();
        let matches = actual.len() == output.expect.len()
            && output.expect.iter().zip(&actual).all(|(e, a)| subset(e, a));
        if !matches {
            failures.push(diff(&output.extract_from, &output.expect, &actual));
        }
    }
    TestResult {
        name: test.name.clone(),
        failures,
    }
}

/// Whether every field given in `expected` equals the same field of `actual`.
pub fn subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|w| subset(v, w))),
        _ => json_eq(expected, actual),
    }
}

fn diff(node: &str, expected: &[Value], actual: &[Value]) -> String {
    let mut out = format!(
        "`{node}`: expected {} signal(s), got {}\n",
        expected.len(),
        actual.len()
    );
    for i in 0..expected.len().max(actual.len()) {
        let e = expected.get(i);
        let a = actual.get(i);
        let same = matches!((e, a), (Some(e), Some(a)) if subset(e, a));
        if same {
            out.push_str(&format!(
                "    {}\n",
                a.map(Value::to_string).unwrap_or_default()
            ));
        } else {
            if let Some(e) = e {
                out.push_str(&format!("  - {e}\n"));
            }
            if let Some(a) = a {
                out.push_str(&format!("  + {a}\n"));
            }
        }
    }
    out
}
