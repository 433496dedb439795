//! Which component types exist: derived from the binary's list of [`Adapter`]s
//! ([`Registry::adapter`]); an embedding program can add its own types by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::component::{Output, Source};
use crate::config::{Diagnostic, Options};
use crate::descriptor::{Adapter, Role};
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

/// A component that an expansion declares, as if a user had written
/// `[sources.NAME]` with `type = TYPE_NAME` and the options: it is checked and built like
/// one, by the builder registered for its type.
#[derive(Debug, Clone, PartialEq)]
pub struct Declaration {
    /// Its name (`local:ollama`).
    pub name: String,
    /// Its type, a registered source type (`discovery`).
    pub type_name: String,
    /// Its options: the keys of its table besides `type`.
    pub options: toml::Table,
}

impl Declaration {
    /// A declaration whose options are `options` serialized: typically the options struct
    /// that the type's builder deserializes.
    pub fn new(
        name: impl Into<String>,
        type_name: impl Into<String>,
        options: &impl serde::Serialize,
    ) -> Result<Declaration, toml::ser::Error> {
        Ok(Declaration {
            name: name.into(),
            type_name: type_name.into(),
            options: toml::Table::try_from(options)?,
        })
    }
}

/// What the `[discovery]` section of a config expands to: sources named
/// `local:<service>`, declared after every source written in the configs, and the outputs
/// they feed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiscoveryExpansion {
    /// The sources to declare, in order.
    pub sources: Vec<Declaration>,
    /// The outputs every declared source feeds: their names are added to each one's
    /// `inputs`. Entry `k` is reported at the `[discovery]` table's `connect.k` when it
    /// names no output.
    pub connect: Vec<String>,
}

/// Expands the `[discovery]` table into declarations (no I/O).
pub type DiscoveryExpander =
    Arc<dyn Fn(&Options<'_>) -> Result<DiscoveryExpansion, Diagnostic> + Send + Sync>;

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
    discovery: Option<DiscoveryExpander>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry of every component type of `adapters`.
    pub fn from_adapters<'a>(adapters: impl IntoIterator<Item = &'a Adapter>) -> Self {
        let mut registry = Registry::new();
        for adapter in adapters {
            registry.adapter(adapter);
        }
        registry
    }

    /// Registers every component type an adapter describes.
    pub fn adapter(&mut self, adapter: &Adapter) -> &mut Self {
        for component in adapter.components {
            match component.role {
                Role::Source(build) => self.source(component.name, build),
                Role::Filter(build) => self.filter(component.name, build),
                Role::Output(kind) => self.output(component.name, kind),
                Role::Link { source, output } => self.link(component.name, source, output),
            };
        }
        self
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

    /// Registers what the `[discovery]` section expands to (without it, `[discovery]` is
    /// an unknown section). The declarations it returns are compiled like written ones.
    pub fn discovery(
        &mut self,
        expand: impl Fn(&Options<'_>) -> Result<DiscoveryExpansion, Diagnostic> + Send + Sync + 'static,
    ) -> &mut Self {
        self.discovery = Some(Arc::new(expand));
        self
    }

    pub(crate) fn discovery_expander(&self) -> Option<&DiscoveryExpander> {
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
