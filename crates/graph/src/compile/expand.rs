//! Phase 2, expand: `[discovery]` → ordinary source declarations.
//!
//! The registry's discovery expander reads the `[discovery]` table and returns sources to
//! declare (`local:ollama` of type `discovery`, …) and the outputs they feed. Each becomes a
//! declaration as if the user had written `[sources."local:ollama"]` after every source in
//! the configs, and its name is added, after the written ones, to the `inputs` of each
//! output that `connect` names. From here on nothing tells them apart from written
//! components. Everything they are reported for points at the `[discovery]` table.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::config::{Diagnostic, Options, Secrets, SourceText};
use crate::registry::{Declaration, Registry};

use super::parse::{Decl, Input, Section, SectionTable};

/// What a `[discovery]` table expands to, with the text the declarations' tables are
/// parsed from (so that they are the same kind of value as a written table).
pub(super) struct Expansion {
    /// The file of the `[discovery]` table.
    file: usize,
    /// Where its `discovery` key is: the declarations' location.
    span: Range<usize>,
    /// Each declaration, and its table (with `type`) as TOML text.
    sources: Vec<(Declaration, String)>,
    /// The outputs to feed: the name, the span of its `connect` entry, and the error to
    /// report when it names no output.
    connect: Vec<(String, Range<usize>, Diagnostic)>,
}

/// A `connect` entry that names no output, reported unless a component of that name
/// failed to build (it was reported then).
pub(super) struct Unconnected {
    /// The name.
    pub(super) name: String,
    /// What to report.
    pub(super) error: Diagnostic,
}

/// Runs the registry's expander on the last `[discovery]` table (an earlier one is an
/// error).
pub(super) fn expand(
    tables: Vec<SectionTable<'_>>,
    files: &[SourceText],
    secrets: &Secrets,
    registry: &Registry,
    errors: &mut Vec<Diagnostic>,
) -> Option<Expansion> {
    let mut tables = tables;
    let (Some(expander), Some(table)) = (registry.discovery_expander(), tables.pop()) else {
        return None;
    };
    let file = &files[table.file];
    if let Some(first) = tables.first() {
        errors.push(files[first.file].error(
            first.key_span.clone(),
            format!(
                "[discovery] is declared twice (also at {})",
                file.location(table.key_span.start)
            ),
        ));
    }
    let connect_spans = connect_spans(&table.value);
    let options = Options::new(file, secrets, "discovery".into(), table.value);
    let expansion = match expander(&options) {
        Ok(e) => e,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    let mut sources = Vec::new();
    for declaration in expansion.sources {
        let mut full = toml::Table::new();
        full.insert("type".into(), declaration.type_name.clone().into());
        full.extend(declaration.options.clone());
        match toml::to_string(&full) {
            Ok(text) => sources.push((declaration, text)),
            Err(e) => {
                errors.push(options.error(format!("cannot declare `{}`: {e}", declaration.name)))
            }
        }
    }
    let connect = expansion
        .connect
        .into_iter()
        .enumerate()
        .map(|(k, name)| {
            let span = connect_spans
                .get(k)
                .cloned()
                .unwrap_or_else(|| table.key_span.clone());
            let error = options.error_at(
                &format!("connect.{k}"),
                format!("`{name}` is not an output"),
            );
            (name, span, error)
        })
        .collect();
    Some(Expansion {
        file: table.file,
        span: table.key_span,
        sources,
        connect,
    })
}

impl Expansion {
    /// Adds the declarations after the written ones (refusing a name already declared),
    /// and their names to the `inputs` of the outputs `connect` names. Returns the
    /// `connect` entries that name no declared output.
    pub(super) fn declare<'e>(
        &'e self,
        decls: &mut Vec<Decl<'e>>,
        files: &[SourceText],
        errors: &mut Vec<Diagnostic>,
    ) -> Vec<Unconnected> {
        let file = &files[self.file];
        let mut names = Vec::new();
        for (declaration, text) in &self.sources {
            if decls.iter().any(|d| d.name == declaration.name) {
                errors.push(file.error(
                    self.span.clone(),
                    format!("discovery: `{}` is already declared", declaration.name),
                ));
                continue;
            }
            let table = match DeTable::parse(text) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(file.error(
                        self.span.clone(),
                        format!("discovery: cannot declare `{}`: {e}", declaration.name),
                    ));
                    continue;
                }
            };
            let mut table = Spanned::new(self.span.clone(), DeValue::Table(table.into_inner()));
            respan(&mut table, &self.span);
            decls.push(Decl {
                section: Section::Source,
                name: declaration.name.clone(),
                file: self.file,
                name_span: self.span.clone(),
                table,
                connected: Vec::new(),
            });
            names.push(declaration.name.as_str());
        }
        let mut unconnected = Vec::new();
        for (output, span, error) in &self.connect {
            let Some(decl) = decls
                .iter_mut()
                .find(|d| d.section == Section::Output && &d.name == output)
            else {
                unconnected.push(Unconnected {
                    name: output.clone(),
                    error: error.clone(),
                });
                continue;
            };
            decl.connected.extend(names.iter().map(|name| Input {
                name: Spanned::new(span.clone(), name.to_string()),
                file: self.file,
            }));
        }
        unconnected
    }
}

/// The span of each entry of the table's `connect` array.
fn connect_spans(table: &Spanned<DeValue<'_>>) -> Vec<Range<usize>> {
    match table.get_ref() {
        DeValue::Table(t) => match t.get("connect").map(|c| c.get_ref()) {
            Some(DeValue::Array(items)) => items.iter().map(|i| i.span()).collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Places a value and everything in it at `span`: a declared table is reported at the
/// `[discovery]` table, not in the text it was parsed from.
fn respan(value: &mut Spanned<DeValue<'_>>, span: &Range<usize>) {
    let inner = std::mem::replace(value, Spanned::new(0..0, DeValue::Boolean(false)));
    *value = Spanned::new(span.clone(), inner.into_inner());
    match value.get_mut() {
        DeValue::Array(items) => {
            for item in items.iter_mut() {
                respan(item, span);
            }
        }
        DeValue::Table(table) => {
            for (_, item) in table.iter_mut() {
                respan(item, span);
            }
        }
        _ => {}
    }
}
