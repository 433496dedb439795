//! Phase 1, parse: config files → component declarations and the other sections' tables,
//! with `${ENV}` substituted.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::config::{Diagnostic, Options, Secrets, SourceText, suggestion};
use crate::registry::Registry;

use super::RuntimeOptions;

const SECTIONS: [&str; 6] = [
    "sources",
    "filters",
    "outputs",
    "runtime",
    "tests",
    "discovery",
];

/// Which section a component is declared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Source,
    Filter,
    Output,
}

impl Section {
    /// The section's key in a config.
    pub(super) fn key(self) -> &'static str {
        match self {
            Section::Source => "sources",
            Section::Filter => "filters",
            Section::Output => "outputs",
        }
    }

    /// What a component of this section is called in messages.
    pub(super) fn noun(self) -> &'static str {
        match self {
            Section::Source => "source",
            Section::Filter => "filter",
            Section::Output => "output",
        }
    }
}

/// One `inputs` entry, in the file it is written in.
#[derive(Clone)]
pub(super) struct Input {
    /// The entry (`NAME`, `NAME.dropped`, `prefix*`, `NAME.inbound`) and where it is.
    pub(super) name: Spanned<String>,
    /// The index of its file.
    pub(super) file: usize,
}

/// One component as declared: `[sources.NAME]`, `[filters.NAME]` or `[outputs.NAME]`
/// (or an equivalent made by expanding `[discovery]`).
pub(super) struct Decl<'a> {
    pub(super) section: Section,
    pub(super) name: String,
    /// The index of the file it is declared in.
    pub(super) file: usize,
    /// Where its name is (a node's location).
    pub(super) name_span: Range<usize>,
    /// Its table: `type`, `inputs` and the options.
    pub(super) table: Spanned<DeValue<'a>>,
    /// Inputs added to those its table lists (by `[discovery] connect`).
    pub(super) connected: Vec<Input>,
}

/// A table of a section that is not a component: `[runtime]`, `[[tests]]`, `[discovery]`.
pub(super) struct SectionTable<'a> {
    /// The index of its file.
    pub(super) file: usize,
    /// Where the section's key is.
    pub(super) key_span: Range<usize>,
    /// The table (an array of tables for `[[tests]]`).
    pub(super) value: Spanned<DeValue<'a>>,
}

/// What the files declare.
pub(super) struct Parsed<'a> {
    /// Components, in the order the files and their tables are written.
    pub(super) components: Vec<Decl<'a>>,
    /// `[runtime]` (the last one written wins).
    pub(super) runtime: RuntimeOptions,
    /// Every `tests` key.
    pub(super) tests: Vec<SectionTable<'a>>,
    /// Every `[discovery]` table (only when the registry expands them).
    pub(super) discovery: Vec<SectionTable<'a>>,
}

/// Parses every file, substituting `${ENV}` references (their values are recorded in
/// `secrets`, so that no message shows them).
pub(super) fn parse<'a>(
    files: &'a [SourceText],
    registry: &Registry,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Secrets,
    errors: &mut Vec<Diagnostic>,
) -> Parsed<'a> {
    let mut parsed = Parsed {
        components: Vec::new(),
        runtime: RuntimeOptions::default(),
        tests: Vec::new(),
        discovery: Vec::new(),
    };
    let mut runtime_tables = Vec::new();
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
            crate::config::env_substitute(v, env, secrets, &mut env_errors);
        }
        errors.extend(env_errors.into_iter().map(|(span, m)| file.error(span, m)));
        for (key, value) in doc.into_inner() {
            let table = SectionTable {
                file: fi,
                key_span: key.span(),
                value,
            };
            let section = match key.get_ref().as_ref() {
                "sources" => Section::Source,
                "filters" => Section::Filter,
                "outputs" => Section::Output,
                "runtime" => {
                    runtime_tables.push(table);
                    continue;
                }
                "tests" => {
                    parsed.tests.push(table);
                    continue;
                }
                "discovery" if registry.discovery_expander().is_some() => {
                    parsed.discovery.push(table);
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
            components(section, fi, file, table, &mut parsed.components, errors);
        }
    }
    for table in runtime_tables {
        let o = Options::new(&files[table.file], secrets, "runtime".into(), table.value);
        match o.parse::<RuntimeOptions>().and_then(|r| r.check(&o)) {
            Ok(r) => parsed.runtime = r,
            Err(e) => errors.push(e),
        }
    }
    parsed
}

/// The components of one section's table (`[sources]`, `[filters]` or `[outputs]`).
fn components<'a>(
    section: Section,
    fi: usize,
    file: &SourceText,
    table: SectionTable<'a>,
    decls: &mut Vec<Decl<'a>>,
    errors: &mut Vec<Diagnostic>,
) {
    let DeValue::Table(entries) = table.value.into_inner() else {
        errors.push(file.error(
            table.key_span,
            format!("`{}` must be a table of named components", section.key()),
        ));
        return;
    };
    for (name, component) in entries {
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
            connected: Vec::new(),
        });
    }
}
