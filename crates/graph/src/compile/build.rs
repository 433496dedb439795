//! Phase 4, build: each declaration through the registry's builder of its type.
//!
//! Building comes before inputs are resolved: a component that fails to build is not a
//! node, and inputs naming it are not reported again.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::config::{
    Diagnostic, Location, MAX_QUEUE, Options, Secrets, SourceText, out_of_range, suggestion,
};
use crate::queue::WhenFull;
use crate::registry::Registry;

use super::NodeKind;
use super::parse::{Decl, Input, Section};

/// Keys the runtime reads from an output's table before handing it the rest.
const OUTPUT_COMMON: [&str; 4] = ["type", "inputs", "when_full", "queue"];
/// Keys the runtime reads from a source's or filter's table.
const COMMON: [&str; 2] = ["type", "inputs"];

/// A built component, not yet placed among the nodes.
pub(super) struct Component {
    /// Its declaration's index, to keep nodes in the order the user wrote them.
    pub(super) order: usize,
    pub(super) name: String,
    pub(super) location: Location,
    pub(super) type_name: String,
    pub(super) kind: NodeKind,
    /// Its inputs as written (then those `[discovery]` connects), unresolved.
    pub(super) inputs: Vec<Input>,
    /// Whether it is a two-way output, with an `.inbound` side.
    pub(super) inbound: bool,
    /// What it was built from (see [`fingerprint`]).
    pub(super) fingerprint: u64,
}

/// What the build phase made.
pub(super) struct Built {
    /// The components that built, in declaration order.
    pub(super) components: Vec<Component>,
    /// The names of those that did not (their errors are reported).
    pub(super) failed: Vec<String>,
}

/// Builds every declaration.
pub(super) fn build(
    decls: &[Decl<'_>],
    files: &[SourceText],
    secrets: &Secrets,
    registry: &Registry,
    errors: &mut Vec<Diagnostic>,
) -> Built {
    let mut built = Built {
        components: Vec::new(),
        failed: Vec::new(),
    };
    for (order, d) in decls.iter().enumerate() {
        match component(order, d, &files[d.file], secrets, registry, errors) {
            Ok(c) => built.components.push(c),
            Err(()) => built.failed.push(d.name.clone()),
        }
    }
    built
}

/// Builds one declaration (the `order`-th); its errors are pushed to `errors`.
fn component(
    order: usize,
    d: &Decl<'_>,
    file: &SourceText,
    secrets: &Secrets,
    registry: &Registry,
    errors: &mut Vec<Diagnostic>,
) -> Result<Component, ()> {
    let DeValue::Table(table) = d.table.get_ref() else {
        return Err(());
    };
    let (type_name, type_span) = type_of(d, table, file).map_err(|e| errors.push(e))?;
    let mut inputs = written_inputs(d, table, file, errors);
    inputs.extend(d.connected.iter().cloned());
    let mut options_table = table.clone();
    let common: &[&str] = match d.section {
        Section::Output => &OUTPUT_COMMON,
        _ => &COMMON,
    };
    for key in common {
        options_table.remove(*key);
    }
    let options = Options::new(
        file,
        secrets,
        d.name.clone(),
        Spanned::new(d.table.span(), DeValue::Table(options_table)),
    );
    let unknown_type = |kinds: Vec<&'static str>| {
        file.error(
            type_span.clone(),
            format!(
                "{}: unknown {} type `{type_name}`{}; known: {}",
                d.name,
                d.section.noun(),
                suggestion(&type_name, kinds.iter().copied()),
                kinds.join(", ")
            ),
        )
    };
    let built = match d.section {
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
    let (kind, inbound) = built.map_err(|e| errors.push(e))?;
    Ok(Component {
        order,
        name: d.name.clone(),
        location: file.location(d.name_span.start),
        fingerprint: fingerprint(file, d.section, table),
        type_name,
        kind,
        inputs,
        inbound,
    })
}

/// A hash of everything a component is built from except its `inputs`: its section, its
/// table's values (after `${ENV}` substitution) and its file's path (relative paths
/// resolve against it). A reload rebuilds a component whose fingerprint changed and only
/// rewires one whose inputs alone did.
fn fingerprint(file: &SourceText, section: Section, table: &DeTable<'_>) -> u64 {
    let mut h = DefaultHasher::new();
    (&file.path, section.noun()).hash(&mut h);
    hash_table(table, &["inputs"], &mut h);
    h.finish()
}

/// Hashes a table's entries in key order (key order does not change what a table
/// means), leaving out the keys in `skip`.
fn hash_table(t: &DeTable<'_>, skip: &[&str], h: &mut DefaultHasher) {
    let mut entries: Vec<_> = t
        .iter()
        .filter(|(k, _)| !skip.contains(&k.get_ref().as_ref()))
        .collect();
    entries.sort_by(|a, b| a.0.get_ref().cmp(b.0.get_ref()));
    (6u8, entries.len()).hash(h);
    for (k, v) in entries {
        k.get_ref().hash(h);
        hash_value(v.get_ref(), h);
    }
}

fn hash_value(v: &DeValue<'_>, h: &mut DefaultHasher) {
    // A tag per variant, so that `"1"` and `1` differ.
    match v {
        DeValue::String(s) => (0u8, s.as_ref()).hash(h),
        DeValue::Integer(i) => (1u8, i.radix(), i.as_str()).hash(h),
        DeValue::Float(f) => (2u8, f.as_str()).hash(h),
        DeValue::Boolean(b) => (3u8, b).hash(h),
        DeValue::Datetime(d) => (4u8, d.to_string()).hash(h),
        DeValue::Array(items) => {
            (5u8, items.len()).hash(h);
            for item in items.iter() {
                hash_value(item.get_ref(), h);
            }
        }
        DeValue::Table(t) => hash_table(t, &[], h),
    }
}

/// The component's `type` and where it is written.
fn type_of(
    d: &Decl<'_>,
    table: &DeTable<'_>,
    file: &SourceText,
) -> Result<(String, Range<usize>), Diagnostic> {
    match table.get("type") {
        Some(t) => match t.get_ref() {
            DeValue::String(s) => Ok((s.to_string(), t.span())),
            _ => Err(file.error(t.span(), format!("{}: `type` must be a string", d.name))),
        },
        None => Err(file.error(d.name_span.clone(), format!("{}: missing `type`", d.name))),
    }
}

/// The `inputs` its table lists: none for a source, at least one for the others.
fn written_inputs(
    d: &Decl<'_>,
    table: &DeTable<'_>,
    file: &SourceText,
    errors: &mut Vec<Diagnostic>,
) -> Vec<Input> {
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
                        DeValue::String(s) => inputs.push(Input {
                            name: Spanned::new(item.span(), s.to_string()),
                            file: d.file,
                        }),
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
    inputs
}

/// What the runtime reads from an output's table: its queue's size and overflow decision.
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
                DeValue::Integer(i) => {
                    let range = 1..=MAX_QUEUE as i128;
                    // i128 holds any TOML integer (and more): nothing wraps before the check.
                    let message = match i128::from_str_radix(i.as_str(), i.radix()) {
                        Ok(n) => match out_of_range("queue", n, &range) {
                            None => {
                                return Ok(OutputCommon {
                                    when_full,
                                    queue: n as usize,
                                });
                            }
                            Some(message) => message,
                        },
                        Err(_) => {
                            format!(
                                "`queue` must be at least 1 and at most {MAX_QUEUE}, got {}",
                                i.as_str()
                            )
                        }
                    };
                    return Err(file.error(v.span(), format!("{name}: {message}")));
                }
                _ => {
                    return Err(file.error(v.span(), format!("{name}: `queue` must be an integer")));
                }
            },
        };
        Ok(OutputCommon { when_full, queue })
    }
}
