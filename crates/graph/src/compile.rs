//! From config files to a checked graph.
//!
//! Everything is checked before anything starts: syntax, unknown sections, types and
//! options, missing or bad values, `${ENV}` references, unknown inputs and cycles. Errors
//! are collected (not just the first) and each carries `FILE:LINE:COL`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::component::{Output, Source};
use crate::config::{Diagnostic, Location, Options, Secrets, SourceText, suggestion};
use crate::filter::{FilterSpec, Port};
use crate::queue::WhenFull;
use crate::registry::Registry;

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
    /// On SIGINT/SIGTERM, how long to let in-flight signals drain to outputs.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout_ms: u64,
    /// Size of the queue from all sources into the graph.
    #[serde(default = "default_queue")]
    pub queue: usize,
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

const SECTIONS: [&str; 6] = [
    "sources",
    "filters",
    "outputs",
    "runtime",
    "tests",
    "discovery",
];
/// Keys the runtime reads from an output's table before handing it the rest.
const OUTPUT_COMMON: [&str; 4] = ["type", "inputs", "when_full", "queue"];

/// Reads and compiles config files with the process environment for `${VAR}`.
pub fn compile(files: &[SourceText], registry: &Registry) -> Result<Graph, Vec<Diagnostic>> {
    compile_with_env(files, registry, &|name| std::env::var(name).ok())
}

struct Decl<'a> {
    section: Section,
    name: String,
    file: usize,
    name_span: Range<usize>,
    table: Spanned<DeValue<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Source,
    Filter,
    Output,
}

impl Section {
    fn key(self) -> &'static str {
        match self {
            Section::Source => "sources",
            Section::Filter => "filters",
            Section::Output => "outputs",
        }
    }
}

/// [`compile`] with an explicit environment (for tests).
pub fn compile_with_env(
    files: &[SourceText],
    registry: &Registry,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Graph, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut secrets = Secrets::default();
    let mut decls: Vec<Decl<'_>> = Vec::new();
    let mut runtime_tables = Vec::new();
    let mut test_tables = Vec::new();
    let mut discovery_tables = Vec::new();

    for (fi, file) in files.iter().enumerate() {
        let mut doc = match DeTable::parse(&file.text) {
            Ok(d) => d,
            Err(e) => {
                errors.push(file.error(e.span().unwrap_or(0..0), e.message().trim_end()));
                continue;
            }
        };
        let mut env_errors = Vec::new();
        for (_, v) in doc.get_mut().iter_mut() {
            crate::config::env_substitute(v, env, &mut secrets, &mut env_errors);
        }
        errors.extend(env_errors.into_iter().map(|(span, m)| file.error(span, m)));
        for (key, value) in doc.into_inner() {
            let section = match key.get_ref().as_ref() {
                "sources" => Section::Source,
                "filters" => Section::Filter,
                "outputs" => Section::Output,
                "runtime" => {
                    runtime_tables.push((fi, value));
                    continue;
                }
                "tests" => {
                    test_tables.push((fi, value));
                    continue;
                }
                "discovery" if registry.discovery_builder().is_some() => {
                    discovery_tables.push((fi, key.span(), value));
                    continue;
                }
                other => {
                    errors.push(file.error(
                        key.span(),
                        format!(
                            "unknown section `{other}`{}; a config has [sources.NAME], [filters.NAME], [outputs.NAME], [runtime], [discovery] and [[tests]]",
                            suggestion(other, SECTIONS)
                        ),
                    ));
                    continue;
                }
            };
            let DeValue::Table(table) = value.into_inner() else {
                errors.push(file.error(
                    key.span(),
                    format!("`{}` must be a table of named components", section.key()),
                ));
                continue;
            };
            for (name, component) in table {
                if !matches!(component.get_ref(), DeValue::Table(_)) {
                    errors.push(file.error(
                        name.span(),
                        format!(
                            "`{}.{}` must be a table (write [{}.{}])",
                            section.key(),
                            name.get_ref(),
                            section.key(),
                            name.get_ref()
                        ),
                    ));
                    continue;
                }
                decls.push(Decl {
                    section,
                    name: name.get_ref().to_string(),
                    file: fi,
                    name_span: name.span(),
                    table: component,
                });
            }
        }
    }

    // Names: unique across files and sections, and usable in `inputs`.
    let mut first_seen: HashMap<String, String> = HashMap::new();
    for d in &decls {
        let file = &files[d.file];
        let here = file.location(d.name_span.start);
        if d.name.is_empty()
            || !d
                .name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == ':')
        {
            errors.push(file.error(
                d.name_span.clone(),
                format!(
                    "invalid name `{}`: use letters, digits, `_`, `-` or `:` (`.` and `*` have a meaning in inputs)",
                    d.name
                ),
            ));
        }
        match first_seen.get(&d.name) {
            Some(prev) => errors.push(file.error(
                d.name_span.clone(),
                format!("`{}` is declared twice (first at {prev})", d.name),
            )),
            None => {
                first_seen.insert(d.name.clone(), here.to_string());
            }
        }
    }

    // Build every component from its options.
    struct Built {
        /// Declaration order, to keep nodes in the order the user wrote them.
        order: usize,
        name: String,
        location: Location,
        type_name: String,
        kind: NodeKind,
        inputs: Vec<(Spanned<String>, usize)>,
        inbound: bool,
    }
    let mut built: Vec<Built> = Vec::new();
    // Components that failed to build: inputs naming them are not reported again.
    let mut failed: Vec<String> = Vec::new();
    for (di, d) in decls.iter().enumerate() {
        let file = &files[d.file];
        let DeValue::Table(table) = d.table.get_ref() else {
            continue;
        };
        let type_name = match table.get("type") {
            Some(t) => match t.get_ref() {
                DeValue::String(s) => s.to_string(),
                _ => {
                    errors
                        .push(file.error(t.span(), format!("{}: `type` must be a string", d.name)));
                    failed.push(d.name.clone());
                    continue;
                }
            },
            None => {
                errors.push(file.error(d.name_span.clone(), format!("{}: missing `type`", d.name)));
                failed.push(d.name.clone());
                continue;
            }
        };
        let type_span = table
            .get("type")
            .map(|t| t.span())
            .unwrap_or(d.name_span.clone());
        let mut inputs = Vec::new();
        match (d.section, table.get("inputs")) {
            (Section::Source, Some(v)) => {
                errors.push(file.error(
                    v.span(),
                    format!(
                        "{}: a source has no `inputs` (declare it under [filters] or [outputs])",
                        d.name
                    ),
                ));
            }
            (Section::Source, None) => {}
            (_, None) => errors.push(file.error(
                d.name_span.clone(),
                format!(
                    "{}: missing `inputs` (the sources or filters it reads)",
                    d.name
                ),
            )),
            (_, Some(v)) => match v.get_ref() {
                DeValue::Array(items) if !items.is_empty() => {
                    for item in items.iter() {
                        match item.get_ref() {
                            DeValue::String(s) => {
                                inputs.push((Spanned::new(item.span(), s.to_string()), d.file))
                            }
                            _ => errors.push(file.error(
                                item.span(),
                                format!("{}: each input must be a string", d.name),
                            )),
                        }
                    }
                }
                _ => errors.push(file.error(
                    v.span(),
                    format!("{}: `inputs` must be a non-empty array of names", d.name),
                )),
            },
        }
        let mut options_table = table.clone();
        let strip: &[&str] = match d.section {
            Section::Output => &OUTPUT_COMMON,
            _ => &["type", "inputs"],
        };
        for key in strip {
            options_table.remove(*key);
        }
        let options = Options::new(
            file,
            &secrets,
            d.name.clone(),
            Spanned::new(d.table.span(), DeValue::Table(options_table)),
        );
        let unknown_type = |kinds: Vec<&'static str>| {
            file.error(
                type_span.clone(),
                format!(
                    "{}: unknown {} type `{type_name}`{}; known: {}",
                    d.name,
                    match d.section {
                        Section::Source => "source",
                        Section::Filter => "filter",
                        Section::Output => "output",
                    },
                    suggestion(&type_name, kinds.iter().copied()),
                    kinds.join(", ")
                ),
            )
        };
        let result = match d.section {
            Section::Source => match registry.source_builder(&type_name) {
                None => Err(unknown_type(registry.source_types().collect())),
                Some(b) => b(&options).map(|s| (NodeKind::Source(s), false)),
            },
            Section::Filter => match registry.filter_builder(&type_name) {
                None => Err(unknown_type(registry.filter_types().collect())),
                Some(b) => b(&options).map(|s| (NodeKind::Filter(s), false)),
            },
            Section::Output => match registry.output_kind(&type_name) {
                None => Err(unknown_type(registry.output_types().collect())),
                Some(kind) => {
                    let common = OutputCommon::read(table, file, &d.name, kind.when_full);
                    match (common, (kind.build)(&options)) {
                        (Ok(c), Ok(o)) => Ok((
                            NodeKind::Output {
                                output: o,
                                when_full: c.when_full,
                                queue: c.queue,
                            },
                            kind.inbound,
                        )),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    }
                }
            },
        };
        match result {
            Ok((kind, inbound)) => built.push(Built {
                order: di,
                name: d.name.clone(),
                location: file.location(d.name_span.start),
                type_name,
                kind,
                inputs,
                inbound,
            }),
            Err(e) => {
                errors.push(e);
                failed.push(d.name.clone());
            }
        }
    }

    // [discovery]: sources named `local:<service>`, feeding the outputs it names.
    let mut discovery_connect: Vec<(String, Diagnostic)> = Vec::new();
    let mut discovery_names: Vec<String> = Vec::new();
    if let (Some(build), Some((fi, span, value))) =
        (registry.discovery_builder(), discovery_tables.pop())
    {
        let file = &files[fi];
        if let Some((other_fi, other_span, _)) = discovery_tables.first() {
            errors.push(files[*other_fi].error(
                other_span.clone(),
                format!(
                    "[discovery] is declared twice (also at {})",
                    file.location(span.start)
                ),
            ));
        }
        let options = Options::new(file, &secrets, "discovery".into(), value);
        match build(&options) {
            Ok(plan) => {
                for (k, name) in plan.connect.iter().enumerate() {
                    discovery_connect.push((
                        name.clone(),
                        options.error_at(
                            &format!("connect.{k}"),
                            format!("`{name}` is not an output"),
                        ),
                    ));
                }
                for (k, (name, source)) in plan.sources.into_iter().enumerate() {
                    if first_seen.contains_key(&name) {
                        errors.push(file.error(
                            span.clone(),
                            format!("discovery: `{name}` is already declared"),
                        ));
                        continue;
                    }
                    discovery_names.push(name.clone());
                    built.push(Built {
                        order: decls.len() + k,
                        name,
                        location: file.location(span.start),
                        type_name: "discovery".into(),
                        kind: NodeKind::Source(source),
                        inputs: Vec::new(),
                        inbound: false,
                    });
                }
            }
            Err(e) => errors.push(e),
        }
    }

    // Node order: sources, the inbound sides of two-way outputs, filters, outputs.
    let rank = |b: &Built| match b.kind {
        NodeKind::Source(_) => 0,
        NodeKind::Filter(_) => 1,
        _ => 2,
    };
    built.sort_by_key(|b| (rank(b), b.order));
    let sources = built.iter().filter(|b| rank(b) == 0).count();
    let inbound_count = built.iter().filter(|b| b.inbound).count();
    let filters = built.iter().filter(|b| rank(b) == 1).count();
    let first_output = sources + inbound_count + filters;
    let mut nodes: Vec<Node> = Vec::with_capacity(built.len() + inbound_count);
    let mut pending: Vec<Vec<(Spanned<String>, usize)>> = Vec::new();
    let mut inbound_nodes: Vec<Node> = Vec::new();
    for (position, b) in built.into_iter().enumerate() {
        let location = b.location;
        if b.inbound {
            // Outputs come last, so this output's index is known now.
            let output = first_output + (position - sources - filters);
            inbound_nodes.push(Node {
                name: format!("{}.inbound", b.name),
                type_name: "inbound".into(),
                kind: NodeKind::Inbound { output },
                inputs: Vec::new(),
                location: location.clone(),
            });
        }
        nodes.push(Node {
            name: b.name,
            type_name: b.type_name,
            kind: b.kind,
            inputs: Vec::new(),
            location,
        });
        pending.push(b.inputs);
    }
    let tail = pending.split_off(sources);
    pending.extend(inbound_nodes.iter().map(|_| Vec::new()));
    pending.extend(tail);
    let tail = nodes.split_off(sources);
    nodes.extend(inbound_nodes);
    nodes.extend(tail);

    // Resolve inputs.
    let by_name: BTreeMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let mut resolved: Vec<Vec<Edge>> = vec![Vec::new(); nodes.len()];
    for (i, inputs) in pending.iter().enumerate() {
        for (input, fi) in inputs {
            let file = &files[*fi];
            match resolve(input.get_ref(), i, &nodes, &by_name) {
                Ok(edges) => {
                    for e in edges {
                        if !resolved[i].contains(&e) {
                            resolved[i].push(e);
                        }
                    }
                }
                Err(_)
                    if failed.iter().any(|f| {
                        let name = input.get_ref();
                        name == f || name.strip_suffix(".dropped") == Some(f)
                    }) => {}
                Err(message) => {
                    errors.push(file.error(input.span(), format!("{}: {message}", nodes[i].name)))
                }
            }
        }
    }
    for (node, edges) in nodes.iter_mut().zip(resolved) {
        node.inputs = edges;
    }
    for (output, error) in discovery_connect {
        match by_name.get(&output) {
            Some(&o) if matches!(nodes[o].kind, NodeKind::Output { .. }) => {
                for name in &discovery_names {
                    if let Some(&from) = by_name.get(name) {
                        let edge = Edge {
                            from,
                            port: Port::Main,
                        };
                        if !nodes[o].inputs.contains(&edge) {
                            nodes[o].inputs.push(edge);
                        }
                    }
                }
            }
            _ if failed.contains(&output) => {}
            _ => errors.push(error),
        }
    }
    if let Some(cycle) = find_cycle(&nodes) {
        let at = &nodes[cycle[0]];
        let path: Vec<&str> = cycle.iter().map(|&i| nodes[i].name.as_str()).collect();
        errors.push(at.location.error(format!(
            "{}: cycle in the graph: {} → {}",
            at.name,
            path.join(" → "),
            path[0]
        )));
    }

    // [runtime] and [[tests]].
    let mut runtime = RuntimeOptions::default();
    for (fi, value) in runtime_tables {
        let o = Options::new(&files[fi], &secrets, "runtime".into(), value);
        match o.parse::<RuntimeOptions>() {
            Ok(r) => runtime = r,
            Err(e) => errors.push(e),
        }
    }
    let mut tests = Vec::new();
    for (fi, value) in test_tables {
        let DeValue::Array(items) = value.get_ref() else {
            errors.push(files[fi].error(
                value.span(),
                "`tests` must be an array of tables: write [[tests]]",
            ));
            continue;
        };
        for item in items.iter() {
            let o = Options::new(&files[fi], &secrets, "tests".into(), item.clone());
            match o.parse::<TestCase>() {
                Ok(t) => {
                    for (k, input) in t.inputs.iter().enumerate() {
                        let ok = by_name
                            .get(input.insert_at.as_str())
                            .is_some_and(|&n| nodes[n].kind.produces());
                        if !ok {
                            errors.push(o.error_at(
                                &format!("inputs.{k}.insert_at"),
                                format!(
                                    "test `{}`: `{}` is not a source or filter{}",
                                    t.name,
                                    input.insert_at,
                                    suggestion(
                                        &input.insert_at,
                                        by_name.keys().map(String::as_str)
                                    )
                                ),
                            ));
                        }
                    }
                    for (k, output) in t.outputs.iter().enumerate() {
                        if resolve(&output.extract_from, usize::MAX, &nodes, &by_name).is_err()
                            || output.extract_from.ends_with('*')
                        {
                            errors.push(o.error_at(
                                &format!("outputs.{k}.extract_from"),
                                format!(
                                    "test `{}`: `{}` is not a source or filter output{}",
                                    t.name,
                                    output.extract_from,
                                    suggestion(
                                        &output.extract_from,
                                        by_name.keys().map(String::as_str)
                                    )
                                ),
                            ));
                        }
                    }
                    tests.push(t);
                }
                Err(e) => errors.push(e),
            }
        }
    }

    if errors.is_empty() {
        Ok(Graph {
            nodes,
            runtime,
            tests,
        })
    } else {
        errors.sort_by(|a, b| (&a.file, a.line, a.col).cmp(&(&b.file, b.line, b.col)));
        errors.dedup();
        Err(errors)
    }
}

struct OutputCommon {
    when_full: WhenFull,
    queue: usize,
}

impl OutputCommon {
    fn read(
        table: &DeTable<'_>,
        file: &SourceText,
        name: &str,
        default: WhenFull,
    ) -> Result<OutputCommon, Diagnostic> {
        let when_full = match table.get("when_full") {
            None => default,
            Some(v) => match v.get_ref() {
                DeValue::String(s) => match s.as_ref() {
                    "block" => WhenFull::Block,
                    "drop_oldest" => WhenFull::DropOldest,
                    "drop_newest" => WhenFull::DropNewest,
                    other => {
                        return Err(file.error(
                            v.span(),
                            format!(
                                "{name}: unknown `when_full` value `{other}`{}; use block, drop_oldest or drop_newest",
                                suggestion(other, ["block", "drop_oldest", "drop_newest"])
                            ),
                        ));
                    }
                },
                _ => {
                    return Err(
                        file.error(v.span(), format!("{name}: `when_full` must be a string"))
                    );
                }
            },
        };
        let queue = match table.get("queue") {
            None => 1024,
            Some(v) => match v.get_ref() {
                DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                    Ok(n) if n >= 1 => n as usize,
                    _ => {
                        return Err(
                            file.error(v.span(), format!("{name}: `queue` must be at least 1"))
                        );
                    }
                },
                _ => {
                    return Err(file.error(v.span(), format!("{name}: `queue` must be an integer")));
                }
            },
        };
        Ok(OutputCommon { when_full, queue })
    }
}

/// Resolves one `inputs` entry for node `me`.
fn resolve(
    input: &str,
    me: usize,
    nodes: &[Node],
    by_name: &BTreeMap<String, usize>,
) -> Result<Vec<Edge>, String> {
    if let Some(prefix) = input.strip_suffix('*') {
        let edges: Vec<Edge> = nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| *i != me && n.kind.produces() && n.name.starts_with(prefix))
            .map(|(i, _)| Edge {
                from: i,
                port: Port::Main,
            })
            .collect();
        if edges.is_empty() {
            return Err(format!("input `{input}` matches no source or filter"));
        }
        return Ok(edges);
    }
    if let Some(&i) = by_name.get(input) {
        return match nodes[i].kind {
            NodeKind::Output { .. } => {
                let inbound = format!("{input}.inbound");
                Err(if by_name.contains_key(&inbound) {
                    format!("`{input}` is an output; what it receives comes out of `{inbound}`")
                } else {
                    format!("`{input}` is an output and produces no signals")
                })
            }
            _ => Ok(vec![Edge {
                from: i,
                port: Port::Main,
            }]),
        };
    }
    if let Some(filter) = input.strip_suffix(".dropped")
        && let Some(&i) = by_name.get(filter)
    {
        return match nodes[i].kind {
            NodeKind::Filter(_) => Ok(vec![Edge {
                from: i,
                port: Port::Dropped,
            }]),
            _ => Err(format!(
                "`{filter}` is not a filter, so it has no `.dropped` output"
            )),
        };
    }
    let mut candidates: Vec<String> = Vec::new();
    for n in nodes.iter().filter(|n| n.kind.produces()) {
        candidates.push(n.name.clone());
        if matches!(n.kind, NodeKind::Filter(_)) {
            candidates.push(format!("{}.dropped", n.name));
        }
    }
    Err(format!(
        "unknown input `{input}`{}",
        suggestion(input, candidates.iter().map(String::as_str))
    ))
}

/// A cycle among the nodes, as a list of node indices, if any.
fn find_cycle(nodes: &[Node]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit(
        i: usize,
        nodes: &[Node],
        marks: &mut [Mark],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        marks[i] = Mark::Active;
        stack.push(i);
        for e in &nodes[i].inputs {
            match marks[e.from] {
                Mark::Active => {
                    let start = stack.iter().position(|&n| n == e.from).unwrap_or(0);
                    let mut cycle: Vec<usize> = stack[start..].to_vec();
                    cycle.reverse();
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(e.from, nodes, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks[i] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; nodes.len()];
    for i in 0..nodes.len() {
        if marks[i] == Mark::New {
            let mut stack = Vec::new();
            if let Some(c) = visit(i, nodes, &mut marks, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

/// Loads config files from paths: a directory contributes its `*.toml` files in name
/// order.
pub fn read_config_paths(paths: &[std::path::PathBuf]) -> Result<Vec<SourceText>, Diagnostic> {
    let mut files = Vec::new();
    for path in paths {
        let io_error = |e: std::io::Error| Diagnostic {
            file: path.display().to_string(),
            line: 0,
            col: 0,
            message: format!("cannot read: {e}"),
        };
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .map_err(io_error)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            entries.sort();
            for p in entries {
                let text = std::fs::read_to_string(&p).map_err(io_error)?;
                files.push(SourceText::new(p.display().to_string(), text));
            }
        } else {
            let text = std::fs::read_to_string(path).map_err(io_error)?;
            files.push(SourceText::new(path.display().to_string(), text));
        }
    }
    Ok(files)
}
