//! Phase 7, check: what only the whole graph can tell. `[discovery] connect` names
//! outputs, the graph has no cycle, and `[[tests]]` insert at and extract from real nodes.

use toml::de::DeValue;

use crate::config::{Diagnostic, Options, Secrets, SourceText, suggestion};

use super::expand::Unconnected;
use super::parse::SectionTable;
use super::resolve::{ByName, resolve};
use super::{Node, TestCase};

/// Reports the `connect` entries that name no output, except those naming a component
/// that failed to build (its failure was reported).
pub(super) fn connect(
    unconnected: Vec<Unconnected>,
    failed: &[String],
    errors: &mut Vec<Diagnostic>,
) {
    errors.extend(
        unconnected
            .into_iter()
            .filter(|u| !failed.contains(&u.name))
            .map(|u| u.error),
    );
}

/// Reports a cycle among the nodes, at its first node.
pub(super) fn cycles(nodes: &[Node], errors: &mut Vec<Diagnostic>) {
    if let Some(cycle) = find_cycle(nodes) {
        let at = &nodes[cycle[0]];
        let path: Vec<&str> = cycle.iter().map(|&i| nodes[i].name.as_str()).collect();
        errors.push(at.location.error(format!(
            "{}: cycle in the graph: {} → {}",
            at.name,
            path.join(" → "),
            path[0]
        )));
    }
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

/// Reads the `[[tests]]`, checking that each inserts at a source or filter and extracts
/// from a source's or filter's output.
pub(super) fn tests(
    tables: Vec<SectionTable<'_>>,
    files: &[SourceText],
    secrets: &Secrets,
    nodes: &[Node],
    by_name: &ByName,
    errors: &mut Vec<Diagnostic>,
) -> Vec<TestCase> {
    let mut tests = Vec::new();
    for table in tables {
        let file = &files[table.file];
        let DeValue::Array(items) = table.value.get_ref() else {
            errors.push(file.error(
                table.value.span(),
                "`tests` must be an array of tables: write [[tests]]",
            ));
            continue;
        };
        for item in items.iter() {
            let o = Options::new(file, secrets, "tests".into(), item.clone());
            match o.parse::<TestCase>() {
                Ok(t) => {
                    test_references(&t, &o, nodes, by_name, errors);
                    tests.push(t);
                }
                Err(e) => errors.push(e),
            }
        }
    }
    tests
}

/// Reports the nodes a test names that it cannot insert at or extract from.
fn test_references(
    t: &TestCase,
    o: &Options<'_>,
    nodes: &[Node],
    by_name: &ByName,
    errors: &mut Vec<Diagnostic>,
) {
    let names = || by_name.keys().map(String::as_str);
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
                    suggestion(&input.insert_at, names())
                ),
            ));
        }
    }
    for (k, output) in t.outputs.iter().enumerate() {
        let resolved = resolve(&output.extract_from, usize::MAX, nodes, by_name);
        let message = match resolved {
            Ok(_) if !output.extract_from.ends_with('*') => continue,
            // A named output that does not exist: the filter's own outputs are the hint.
            Err(message) if message.contains("has no output") => message,
            _ => format!(
                "`{}` is not a source or filter output{}",
                output.extract_from,
                suggestion(&output.extract_from, names())
            ),
        };
        errors.push(o.error_at(
            &format!("outputs.{k}.extract_from"),
            format!("test `{}`: {message}", t.name),
        ));
    }
}
