//! Which component types exist: the CLI registers the built-in filters and every adapter.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::component::{Output, Source};
use crate::config::{Diagnostic, Options};
use crate::filter::FilterSpec;
use crate::queue::WhenFull;

/// Builds a source from its options (no I/O: building happens at validation too).
pub type SourceBuilder = fn(&Options<'_>) -> Result<Box<dyn Source>, Diagnostic>;
/// Builds a filter spec from its options.
pub type FilterBuilder = fn(&Options<'_>) -> Result<FilterSpec, Diagnostic>;
/// Builds an output from its options (no I/O).
pub type OutputBuilder = fn(&Options<'_>) -> Result<Box<dyn Output>, Diagnostic>;

/// A source builder as the registry keeps it: any function or closure, so that a builder
/// can capture what it hands its sources (an embedding program's channel ends).
type BuildSource = Arc<dyn Fn(&Options<'_>) -> Result<Box<dyn Source>, Diagnostic> + Send + Sync>;
/// An output builder as the registry keeps it (see [`BuildSource`]).
type BuildOutput = Arc<dyn Fn(&Options<'_>) -> Result<Box<dyn Output>, Diagnostic> + Send + Sync>;

/// What the `[discovery]` section of a config makes: sources named `local:<service>`, and
/// the outputs they feed.
pub struct DiscoveryPlan {
    /// The sources, by name.
    pub sources: Vec<(String, Box<dyn Source>)>,
    /// The outputs every discovered source feeds.
    pub connect: Vec<String>,
}

/// Builds the discovery sources from the `[discovery]` table (no I/O).
pub type DiscoveryBuilder =
    Arc<dyn Fn(&Options<'_>) -> Result<DiscoveryPlan, Diagnostic> + Send + Sync>;

/// An output type.
#[derive(Clone, Copy)]
pub struct OutputKind {
    /// Builds it.
    pub build: OutputBuilder,
    /// Whether it talks both ways: what it receives comes out of `NAME.inbound`.
    pub inbound: bool,
    /// Its queue's default overflow decision.
    pub when_full: WhenFull,
}

/// An output type as the registry keeps it: [`OutputKind`] with any builder.
#[derive(Clone)]
pub(crate) struct RegisteredOutput {
    pub(crate) build: BuildOutput,
    pub(crate) inbound: bool,
    pub(crate) when_full: WhenFull,
}

/// The component types a config may use.
#[derive(Default, Clone)]
pub struct Registry {
    sources: BTreeMap<&'static str, BuildSource>,
    filters: BTreeMap<&'static str, FilterBuilder>,
    outputs: BTreeMap<&'static str, RegisteredOutput>,
    discovery: Option<DiscoveryBuilder>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a source type, built by a function or by a closure.
    pub fn source(
        &mut self,
        type_name: &'static str,
        build: impl Fn(&Options<'_>) -> Result<Box<dyn Source>, Diagnostic> + Send + Sync + 'static,
    ) -> &mut Self {
        self.sources.insert(type_name, Arc::new(build));
        self
    }

    /// Registers a filter type.
    pub fn filter(&mut self, type_name: &'static str, build: FilterBuilder) -> &mut Self {
        self.filters.insert(type_name, build);
        self
    }

    /// Registers an output type.
    pub fn output(&mut self, type_name: &'static str, kind: OutputKind) -> &mut Self {
        self.outputs.insert(
            type_name,
            RegisteredOutput {
                build: Arc::new(kind.build),
                inbound: kind.inbound,
                when_full: kind.when_full,
            },
        );
        self
    }

    /// Registers a one-way output type built by a function or by a closure (which can
    /// capture what it hands its outputs, such as a channel's sending end); `when_full` is
    /// its queue's default overflow decision.
    pub fn output_fn(
        &mut self,
        type_name: &'static str,
        when_full: WhenFull,
        build: impl Fn(&Options<'_>) -> Result<Box<dyn Output>, Diagnostic> + Send + Sync + 'static,
    ) -> &mut Self {
        self.outputs.insert(
            type_name,
            RegisteredOutput {
                build: Arc::new(build),
                inbound: false,
                when_full,
            },
        );
        self
    }

    /// Registers a two-way link type (an agent runtime's connection) under one name: as a
    /// source it only listens; as an output it sends controls and what it receives comes
    /// out of `NAME.inbound`. Its queue defaults to `drop_oldest`: while the peer is away
    /// it keeps the latest `queue` controls (sent once the peer is back) and counts the
    /// ones it drops, instead of stalling the whole graph.
    pub fn link(
        &mut self,
        type_name: &'static str,
        build_source: SourceBuilder,
        build_output: OutputBuilder,
    ) -> &mut Self {
        self.source(type_name, build_source).output(
            type_name,
            OutputKind {
                build: build_output,
                inbound: true,
                when_full: WhenFull::DropOldest,
            },
        )
    }

    /// Registers what the `[discovery]` section builds.
    pub fn discovery(&mut self, build: DiscoveryBuilder) -> &mut Self {
        self.discovery = Some(build);
        self
    }

    pub(crate) fn discovery_builder(&self) -> Option<&DiscoveryBuilder> {
        self.discovery.as_ref()
    }

    pub(crate) fn source_builder(&self, t: &str) -> Option<&BuildSource> {
        self.sources.get(t)
    }
    pub(crate) fn filter_builder(&self, t: &str) -> Option<FilterBuilder> {
        self.filters.get(t).copied()
    }
    pub(crate) fn output_kind(&self, t: &str) -> Option<&RegisteredOutput> {
        self.outputs.get(t)
    }

    /// Registered source type names.
    pub fn source_types(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.sources.keys().copied()
    }
    /// Registered filter type names.
    pub fn filter_types(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.filters.keys().copied()
    }
    /// Registered output type names.
    pub fn output_types(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.outputs.keys().copied()
    }
}
