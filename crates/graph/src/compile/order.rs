//! Phase 5, order: built components become the graph's nodes, in the order the runtime
//! relies on: sources, the `.inbound` sides of two-way outputs, filters, outputs; within
//! each, the order they are declared in.

use super::build::Component;
use super::parse::Input;
use super::{Node, NodeKind};

/// The nodes, and the inputs each one lists (unresolved; none for sources and inbound
/// sides), index for index.
pub(super) fn place(mut components: Vec<Component>) -> (Vec<Node>, Vec<Vec<Input>>) {
    components.sort_by_key(|c| (rank(&c.kind), c.order));
    let sources = components.iter().filter(|c| rank(&c.kind) == 0).count();
    let filters = components.iter().filter(|c| rank(&c.kind) == 1).count();
    let inbound = components.iter().filter(|c| c.inbound).count();
    // Outputs come last, so the index of each output an inbound side refers to is known.
    let first_output = sources + inbound + filters;
    let inbound_sides: Vec<Node> = components[sources + filters..]
        .iter()
        .enumerate()
        .filter(|(_, c)| c.inbound)
        .map(|(k, c)| Node {
            name: format!("{}.inbound", c.name),
            type_name: "inbound".into(),
            kind: NodeKind::Inbound {
                output: first_output + k,
            },
            inputs: Vec::new(),
            location: c.location.clone(),
            fingerprint: c.fingerprint,
        })
        .collect();

    let mut nodes = Vec::with_capacity(components.len() + inbound);
    let mut inputs = Vec::with_capacity(components.len() + inbound);
    let mut components = components.into_iter();
    for c in components.by_ref().take(sources) {
        nodes.push(node(c, &mut inputs));
    }
    for side in inbound_sides {
        nodes.push(side);
        inputs.push(Vec::new());
    }
    for c in components {
        nodes.push(node(c, &mut inputs));
    }
    (nodes, inputs)
}

/// Sources first, then filters, then outputs.
fn rank(kind: &NodeKind) -> u8 {
    match kind {
        NodeKind::Source(_) => 0,
        NodeKind::Filter(_) => 1,
        _ => 2,
    }
}

/// The node of a component, its inputs pushed to `inputs`.
fn node(c: Component, inputs: &mut Vec<Vec<Input>>) -> Node {
    inputs.push(c.inputs);
    Node {
        name: c.name,
        type_name: c.type_name,
        kind: c.kind,
        inputs: Vec::new(),
        location: c.location,
        fingerprint: c.fingerprint,
    }
}
