//! From config files to a checked graph, in phases.
//!
//! Everything is checked before anything starts: syntax, unknown sections, types and
//! options, missing or bad values, `${ENV}` references, unknown inputs and cycles. Errors
//! are collected (not just the first) and each carries `FILE:LINE:COL`.
//!
//! [`compile_with_env`] runs the phases in this order, each one a module:
//!
//! 1. `parse`: files → component declarations and the `[runtime]`, `[[tests]]` and
//!    `[discovery]` tables, `${ENV}` substituted;
//! 2. `expand`: `[discovery]` → more source declarations, as if written;
//! 3. `names`: names are unique and valid;
//! 4. `build`: each declaration through the registry (a component that fails is no node);
//! 5. `order`: nodes in the runtime's order (sources, inbound sides, filters, outputs);
//! 6. `resolve`: `inputs` → edges;
//! 7. `check`: `connect` names outputs, no cycle, `[[tests]]` name real nodes.
//!
//! [`read_config_paths`] reads the files first.

mod build;
mod check;
mod expand;
mod names;
mod order;
mod parse;
mod read;
mod resolve;

use serde::Deserialize;

use crate::component::{Output, Source};
use crate::config::{Diagnostic, Location, MAX_QUEUE, Options, Secrets, SourceText};
use crate::filter::{FilterSpec, Port};
use crate::queue::WhenFull;
use crate::registry::Registry;

pub use read::read_config_paths;

/// A checked graph, ready to run.
pub struct Graph {
    /// Nodes: sources (and outputs' `.inbound` sides) first, then filters, then outputs.
    pub nodes: Vec<Node>,
    /// `[runtime]` options.
    pub runtime: RuntimeOptions,
    /// `[[tests]]` written in the config.
    pub tests: Vec<TestCase>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.nodes)
            .field("runtime", &self.runtime)
            .field("tests", &self.tests.len())
            .finish()
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("type", &self.type_name)
            .field("inputs", &self.inputs)
            .finish()
    }
}

/// One node of the graph.
pub struct Node {
    /// Its name (`pads`, `ui.inbound`, `tokens`, `ui`).
    pub name: String,
    /// Its type (`midi`, `throttle`, `sidecar`; `inbound` for an output's inbound side).
    pub type_name: String,
    /// What it is.
    pub kind: NodeKind,
    /// The outputs it consumes (filters and outputs).
    pub inputs: Vec<Edge>,
    /// Where it is declared.
    pub location: Location,
    /// A hash of its type and options (not its inputs): a reload keeps a running
    /// component whose fingerprint is unchanged.
    pub fingerprint: u64,
}

impl Node {
    /// How an input names this node's `port`: `NAME`, `NAME.dropped` or `NAME.<port>`.
    pub fn port_name(&self, port: Port) -> String {
        match (port, &self.kind) {
            (Port::Main, _) => self.name.clone(),
            (Port::Dropped, _) => format!("{}.dropped", self.name),
            (Port::Named(i), NodeKind::Filter(spec)) => match spec.ports().get(usize::from(i)) {
                Some(port) => format!("{}.{port}", self.name),
                None => self.name.clone(),
            },
            (Port::Named(_), _) => self.name.clone(),
        }
    }
}

/// What a node is.
pub enum NodeKind {
    /// A source.
    Source(Box<dyn Source>),
    /// The receiving side of a two-way output (the node index of the output).
    Inbound {
        /// The output node.
        output: usize,
    },
    /// A filter.
    Filter(FilterSpec),
    /// An output and its queue.
    Output {
        /// The output.
        output: Box<dyn Output>,
        /// Its queue's overflow decision.
        when_full: WhenFull,
        /// Its queue's size.
        queue: usize,
    },
}

impl NodeKind {
    /// Whether this node produces signals (sources, inbound sides and filters).
    pub fn produces(&self) -> bool {
        !matches!(self, NodeKind::Output { .. })
    }
}

/// An edge: a node's port feeding another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    /// The upstream node.
    pub from: usize,
    /// Which of its outputs.
    pub port: Port,
}

/// `[runtime]`: options of the runtime itself.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeOptions {
    /// On SIGINT/SIGTERM, how long to let in-flight signals drain to outputs, in ms: from
    /// 0 to 3600000 (one hour); default 5000.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout_ms: u64,
    /// Size of the queue from all sources into the graph, in signals: from 1 to 1000000;
    /// default 1024.
    #[serde(default = "default_queue")]
    pub queue: usize,
}

/// The longest `[runtime] shutdown_timeout_ms`: one hour.
pub const MAX_SHUTDOWN_TIMEOUT_MS: u64 = 60 * 60 * 1000;

impl RuntimeOptions {
    /// Checks the bounds; an error points at the value at fault.
    pub fn check(self, options: &Options<'_>) -> Result<Self, Diagnostic> {
        options.check_range(
            "shutdown_timeout_ms",
            self.shutdown_timeout_ms,
            0..=MAX_SHUTDOWN_TIMEOUT_MS,
        )?;
        options.check_range("queue", self.queue, 1..=MAX_QUEUE)?;
        Ok(self)
    }
}

fn default_shutdown_timeout() -> u64 {
    5000
}
fn default_queue() -> usize {
    1024
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            shutdown_timeout_ms: default_shutdown_timeout(),
            queue: default_queue(),
        }
    }
}

/// One `[[tests]]` entry: signals inserted at nodes, signals expected out of nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// The test's name.
    pub name: String,
    /// Signals to insert, in order.
    pub inputs: Vec<TestInput>,
    /// What must come out.
    #[serde(default)]
    pub outputs: Vec<TestOutput>,
}

/// A signal inserted by a test.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestInput {
    /// The source or filter whose output the signal is inserted as.
    pub insert_at: String,
    /// The signal (an envelope; missing fields are filled).
    pub signal: serde_json::Value,
}

/// What a test expects out of a node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestOutput {
    /// The filter whose output is checked (or `NAME.dropped`).
    pub extract_from: String,
    /// The expected signals, in order; each matches when every field it gives equals the
    /// actual signal's (fields it omits are not checked).
    pub expect: Vec<serde_json::Value>,
}

/// Reads and compiles config files with the process environment for `${VAR}`.
pub fn compile(files: &[SourceText], registry: &Registry) -> Result<Graph, Vec<Diagnostic>> {
    compile_with_env(files, registry, &|name| std::env::var(name).ok())
}

/// [`compile`] with an explicit environment (for tests).
pub fn compile_with_env(
    files: &[SourceText],
    registry: &Registry,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Graph, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut secrets = Secrets::default();
    let parsed = parse::parse(files, registry, env, &mut secrets, &mut errors);
    let secrets = &secrets;
    let expansion = expand::expand(parsed.discovery, files, secrets, registry, &mut errors);
    let mut decls = parsed.components;
    let unconnected = match &expansion {
        Some(expansion) => expansion.declare(&mut decls, files, &mut errors),
        None => Vec::new(),
    };
    names::check(&decls, files, &mut errors);
    let built = build::build(&decls, files, secrets, registry, &mut errors);
    let (mut nodes, inputs) = order::place(built.components);
    let by_name = resolve::index(&nodes);
    resolve::inputs(
        &mut nodes,
        inputs,
        &by_name,
        &built.failed,
        files,
        &mut errors,
    );
    check::connect(unconnected, &built.failed, &mut errors);
    check::cycles(&nodes, &mut errors);
    let tests = check::tests(parsed.tests, files, secrets, &nodes, &by_name, &mut errors);

    if errors.is_empty() {
        Ok(Graph {
            nodes,
            runtime: parsed.runtime,
            tests,
        })
    } else {
        // Every phase's messages, whatever value they quote (a `type` included): no
        // substituted `${ENV}` value is shown.
        for e in &mut errors {
            e.message = secrets.scrub(&e.message);
        }
        errors.sort_by(|a, b| (&a.file, a.line, a.col).cmp(&(&b.file, b.line, b.col)));
        errors.dedup();
        Err(errors)
    }
}
