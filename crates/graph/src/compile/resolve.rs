//! Phase 6, resolve: each `inputs` entry (`NAME`, `NAME.dropped`, `NAME.<port>` of a filter
//! with named outputs, `prefix*`, `NAME.inbound`) becomes edges from the nodes it names.

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
                        .any(|f| name == f || name.rsplit_once('.').map(|(n, _)| n) == Some(f)) => {
                }
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
            .filter(|(i, n)| {
                *i != me && n.kind.produces() && !has_ports(n) && n.name.starts_with(prefix)
            })
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
            NodeKind::Filter(ref spec) if !spec.ports().is_empty() => Err(format!(
                "`{input}` sends its signals out of its named outputs: use {}",
                port_names(input, spec.ports())
            )),
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
    if let Some((filter, port)) = input.rsplit_once('.')
        && let Some(&i) = by_name.get(filter)
        && let NodeKind::Filter(spec) = &nodes[i].kind
        && !spec.ports().is_empty()
    {
        return match spec.port(port) {
            Some(port) => Ok(vec![Edge { from: i, port }]),
            None => Err(format!(
                "`{filter}` has no output `{port}`: its outputs are {} and `{filter}.dropped`",
                port_names(filter, spec.ports())
            )),
        };
    }
    let mut candidates: Vec<String> = Vec::new();
    for n in nodes.iter().filter(|n| n.kind.produces()) {
        if !has_ports(n) {
            candidates.push(n.name.clone());
        }
        if let NodeKind::Filter(spec) = &n.kind {
            candidates.push(format!("{}.dropped", n.name));
            candidates.extend(spec.ports().iter().map(|p| format!("{}.{p}", n.name)));
        }
    }
    Err(format!(
        "unknown input `{input}`{}",
        suggestion(input, candidates.iter().map(String::as_str))
    ))
}

/// Whether `node` is a filter with named outputs (whose bare name is not an input).
fn has_ports(node: &Node) -> bool {
    matches!(&node.kind, NodeKind::Filter(spec) if !spec.ports().is_empty())
}

/// `` `r.a`, `r.b` `` for the named outputs of `filter`.
fn port_names(filter: &str, ports: &[String]) -> String {
    ports
        .iter()
        .map(|p| format!("`{filter}.{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
