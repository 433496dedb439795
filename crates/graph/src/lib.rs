//! patchbay's wiring graph.
//!
//! Users write pipelines as TOML config files: sources, filters and outputs wired by
//! their `inputs`. This crate loads and checks them ([`config`], [`compile()`]), defines the
//! interfaces components implement ([`filter`] for filters, [`component`] for sources and
//! outputs) and how an adapter describes what it offers ([`descriptor`]), and runs the
//! graph ([`engine`] synchronously, [`runtime`] with tokio).
//! Transports that talk both ways reach their graph ends through [`LinkEnds`]. A program
//! that embeds a graph feeds it and reads it through channels, and runs it on a task
//! ([`embed`]).

pub mod approvals;
pub mod compile;
pub mod component;
pub mod config;
pub mod descriptor;
pub mod embed;
pub mod engine;
mod events;
pub mod filter;
pub mod link_ends;
pub mod probe;
pub mod queue;
pub mod registry;
pub mod runtime;
pub mod telemetry;
pub mod testing;

pub use compile::{Graph, Node, NodeKind, compile, read_config_paths};
pub use component::{
    BoxFuture, ComponentError, Emitted, Output, OutputContext, Refused, Shutdown, Source,
    SourceContext,
};
pub use config::{Diagnostic, Options, SourceText};
pub use descriptor::{Adapter, ComponentType, Probe, Role, WrapRequest, options_of};
pub use embed::{ChannelOutput, ChannelSource, RunningGraph};
pub use filter::{ClockKind, Emit, Filter, FilterSpec, Port};
pub use link_ends::LinkEnds;
pub use queue::{SignalQueue, WhenFull};
pub use registry::{Declaration, DiscoveryExpander, DiscoveryExpansion, OutputKind, Registry};
pub use telemetry::{ComponentStats, HealthState, Overall, OverallStatus, Telemetry};
