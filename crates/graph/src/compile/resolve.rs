//! Phase 6, resolve: each `inputs` entry (`NAME`, `NAME.dropped`, `prefix*`,
//! `NAME.inbound`) becomes edges from the nodes it names.

use std::collections::BTreeMap;

use crate::config::{Diagnostic, SourceText, suggestion};
use crate::filter::Port;

use super::parse::Input;
use super::{Edge, Node, NodeKind};

/// Node indices by name.
pub(super) type ByName = BTreeMap<String, usize>;

/// The by-name index of the nodes.
pub(super) fn index(nodes: &[Node]) -> ByName {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect()
}

/// Sets each node's edges from its `inputs` (index for index with `nodes`), each edge
/// once. An input naming a component in `failed` is not reported: its failure was.
pub(super) fn inputs(
    nodes: &mut [Node],
    inputs: Vec<Vec<Input>>,
    by_name: &ByName,
    failed: &[String],
    files: &[SourceText],
    errors: &mut Vec<Diagnostic>,
) {
    let mut resolved: Vec<Vec<Edge>> = vec![Vec::new(); nodes.len()];
    for (i, inputs) in inputs.iter().enumerate() {
        for input in inputs {
            let name = input.name.get_ref();
            match resolve(name, i, nodes, by_name) {
                Ok(edges) => {
                    for e in edges {
                        if !resolved[i].contains(&e) {
                            resolved[i].push(e);
                        }
                    }
                }
                Err(_)
                    if failed
                        .iter()
                        .any(|f| name == f || name.strip_suffix(".dropped") == Some(f)) => {}
                Err(message) => errors.push(
                    files[input.file]
                        .error(input.name.span(), format!("{}: {message}", nodes[i].name)),
                ),
            }
        }
    }
    for (node, edges) in nodes.iter_mut().zip(resolved) {
        node.inputs = edges;
    }
}

/// Resolves one `inputs` entry for node `me` (`usize::MAX` for none).
pub(super) fn resolve(
    input: &str,
    me: usize,
    nodes: &[Node],
    by_name: &ByName,
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
