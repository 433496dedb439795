//! What an adapter offers, described once.
//!
//! Every adapter crate exports one [`Adapter`] value: its component types with their
//! builders and options, whether it decodes captures (`patchbay parse`), wraps programs
//! (`patchbay wrap`), and which local services it can find (`patchbay discover`). The
//! binary keeps one list of these values; the [`Registry`](crate::Registry), the
//! `parse`/`wrap`/`discover` commands, `patchbay components` and the did-you-mean of
//! error messages are all derived from that list, so adding an adapter is one crate and
//! one line.

use patchbay_signal::decode::StreamDecoder;
use schemars::JsonSchema;

use std::time::Duration;

use crate::component::BoxFuture;
use crate::probe::{ProbeContext, Service};
use crate::queue::WhenFull;
use crate::registry::{FilterBuilder, OutputBuilder, OutputKind, SourceBuilder};

/// One adapter crate's offer.
#[derive(Clone, Copy)]
pub struct Adapter {
    /// The adapter's name (`escapement`, `midi`).
    pub name: &'static str,
    /// The protocol name of `patchbay parse --protocol` and `patchbay wrap --protocol`
    /// (the adapter's name, but `sajou` for generic NDJSON envelopes).
    pub protocol: &'static str,
    /// One line saying what it connects to.
    pub summary: &'static str,
    /// Its component types.
    pub components: &'static [ComponentType],
    /// Builds the decoder of `patchbay parse --protocol NAME`, given the signals' `source`.
    pub parse: Option<ParseFn>,
    /// Runs a program under `patchbay wrap --protocol NAME`.
    pub wrap: Option<WrapFn>,
    /// The local services it finds (`patchbay discover`, `[discovery]`).
    pub probes: &'static [Probe],
}

impl Adapter {
    /// An adapter whose protocol name is its name, with these component types and nothing
    /// else: no decoder, no wrapper, no probe (the modifiers below add them).
    pub const fn new(
        name: &'static str,
        summary: &'static str,
        components: &'static [ComponentType],
    ) -> Self {
        Adapter {
            name,
            protocol: name,
            summary,
            components,
            parse: None,
            wrap: None,
            probes: &[],
        }
    }

    /// With a protocol name other than its name (`sajou` for generic NDJSON envelopes).
    pub const fn protocol(self, protocol: &'static str) -> Self {
        Adapter { protocol, ..self }
    }

    /// With the decoder of `patchbay parse --protocol NAME`.
    pub const fn parse(self, parse: ParseFn) -> Self {
        Adapter {
            parse: Some(parse),
            ..self
        }
    }

    /// With the wrapper of `patchbay wrap --protocol NAME`.
    pub const fn wrap(self, wrap: WrapFn) -> Self {
        Adapter {
            wrap: Some(wrap),
            ..self
        }
    }

    /// With these probes of local services.
    pub const fn probes(self, probes: &'static [Probe]) -> Self {
        Adapter { probes, ..self }
    }
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("name", &self.name)
            .field(
                "components",
                &self.components.iter().map(|c| c.name).collect::<Vec<_>>(),
            )
            .field("parse", &self.parse.is_some())
            .field("wrap", &self.wrap.is_some())
            .field(
                "probes",
                &self.probes.iter().map(|p| p.service).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One component type: what a config's `type = "NAME"` builds.
#[derive(Clone, Copy)]
pub struct ComponentType {
    /// The `type` value.
    pub name: &'static str,
    /// One line for `patchbay components`.
    pub summary: &'static str,
    /// Where it may be declared, and how it is built.
    pub role: Role,
    /// Its options as a JSON schema (types, defaults, and the config struct's doc comments
    /// as descriptions): see [`options_of`].
    pub options: fn() -> schemars::Schema,
}

impl ComponentType {
    /// A source type (`[sources.NAME]`).
    pub const fn source(
        name: &'static str,
        summary: &'static str,
        build: SourceBuilder,
        options: fn() -> schemars::Schema,
    ) -> Self {
        ComponentType {
            name,
            summary,
            role: Role::Source(build),
            options,
        }
    }

    /// A filter type (`[filters.NAME]`).
    pub const fn filter(
        name: &'static str,
        summary: &'static str,
        build: FilterBuilder,
        options: fn() -> schemars::Schema,
    ) -> Self {
        ComponentType {
            name,
            summary,
            role: Role::Filter(build),
            options,
        }
    }

    /// A one-way output type (`[outputs.NAME]`) whose queue blocks when full (nothing is
    /// lost); [`inbound`](Self::inbound) and [`when_full`](Self::when_full) change that.
    pub const fn output(
        name: &'static str,
        summary: &'static str,
        build: OutputBuilder,
        options: fn() -> schemars::Schema,
    ) -> Self {
        ComponentType {
            name,
            summary,
            role: Role::Output(OutputKind {
                build,
                inbound: false,
                when_full: WhenFull::Block,
            }),
            options,
        }
    }

    /// A two-way link type (see [`Role::Link`]).
    pub const fn link(
        name: &'static str,
        summary: &'static str,
        source: SourceBuilder,
        output: OutputBuilder,
        options: fn() -> schemars::Schema,
    ) -> Self {
        ComponentType {
            name,
            summary,
            role: Role::Link { source, output },
            options,
        }
    }

    /// This output talking both ways: what it receives comes out of `NAME.inbound`.
    /// Only an output has it (anything else does not compile: descriptors are constants).
    pub const fn inbound(mut self) -> Self {
        match &mut self.role {
            Role::Output(kind) => kind.inbound = true,
            _ => panic!("only an output type has `inbound`"),
        }
        self
    }

    /// This output's queue with another default overflow decision. Only an output has it.
    pub const fn when_full(mut self, when_full: WhenFull) -> Self {
        match &mut self.role {
            Role::Output(kind) => kind.when_full = when_full,
            _ => panic!("only an output type has `when_full`"),
        }
        self
    }
}

/// Where a component type may be declared, with its builders.
#[derive(Clone, Copy)]
pub enum Role {
    /// Under `[sources.NAME]`.
    Source(SourceBuilder),
    /// Under `[filters.NAME]`.
    Filter(FilterBuilder),
    /// Under `[outputs.NAME]`.
    Output(OutputKind),
    /// A two-way link to a peer (an agent runtime): under `[sources.NAME]` it only listens;
    /// under `[outputs.NAME]` it also sends what it is given, and what the peer sends comes
    /// out of `NAME.inbound`.
    Link {
        /// Builds the listen-only side.
        source: SourceBuilder,
        /// Builds the two-way side.
        output: OutputBuilder,
    },
}

impl Role {
    /// `source`, `filter`, `output` or `source, output` (a link).
    pub fn sections(&self) -> &'static str {
        match self {
            Role::Source(_) => "source",
            Role::Filter(_) => "filter",
            Role::Output(_) => "output",
            Role::Link { .. } => "source, output",
        }
    }
}

/// The JSON schema of an options struct, every definition inlined (what
/// [`ComponentType::options`] holds: `options: options_of::<MyConfig>`).
pub fn options_of<T: JsonSchema>() -> schemars::Schema {
    schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>()
}

/// Implements [`JsonSchema`] for an option type that has a syntax of its own (a dot path,
/// a rate, a jq expression): `described_as!(Rate, {"type": "string"})`. Its options then
/// show with that JSON type in `patchbay components`.
#[macro_export]
macro_rules! described_as {
    ($type:ty, $schema:tt) => {
        impl $crate::descriptor::schemars::JsonSchema for $type {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($type))
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(
                _: &mut $crate::descriptor::schemars::SchemaGenerator,
            ) -> $crate::descriptor::schemars::Schema {
                $crate::descriptor::schemars::json_schema!($schema)
            }
        }
    };
}

/// The schema crate, for [`described_as!`] and for deriving `JsonSchema` on options.
pub use schemars;

/// Builds a capture decoder whose signals have the given `source`.
pub type ParseFn = fn(source: &str) -> Box<dyn StreamDecoder>;

/// What `patchbay wrap` hands an adapter's wrapper.
#[derive(Debug, Clone)]
pub struct WrapRequest {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The running patchbay's sidecar (`http://127.0.0.1:7878`).
    pub to: String,
    /// The name control signals address the program by (`payload.target`), when given.
    pub name: Option<String>,
}

/// Why a wrapper could not run its program.
pub type WrapError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Runs a wrapped program to its end; resolves to its exit status.
pub type WrapFn = fn(WrapRequest) -> BoxFuture<Result<i32, WrapError>>;

/// A local service an adapter knows how to find.
#[derive(Clone, Copy)]
pub struct Probe {
    /// The service's name: `patchbay discover` lists it, `[discovery]` makes a source
    /// `local:<service>` for it.
    pub service: &'static str,
    /// How often the daemon probes it at least, whatever `interval_ms` says (MIDI: every
    /// second, so that a controller plugged in shows at once).
    pub rescan: Option<Duration>,
    /// Probes once; `None` when there is nothing to probe.
    pub run: fn(ProbeContext) -> BoxFuture<Option<Service>>,
}

impl Probe {
    /// The probe of `service`, run at the daemon's `interval_ms`.
    pub const fn new(
        service: &'static str,
        run: fn(ProbeContext) -> BoxFuture<Option<Service>>,
    ) -> Self {
        Probe {
            service,
            rescan: None,
            run,
        }
    }

    /// Probed at least every `every`, whatever `interval_ms` says.
    pub const fn rescan(self, every: Duration) -> Self {
        Probe {
            rescan: Some(every),
            ..self
        }
    }
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("service", &self.service)
            .field("rescan", &self.rescan)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::{Output, Source};
    use crate::config::{Diagnostic, Options};
    use crate::filter::FilterSpec;
    use patchbay_signal::decode::NdjsonDecoder;

    fn source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
        Err(options.error("a test source is never built"))
    }

    fn filter(options: &Options<'_>) -> Result<FilterSpec, Diagnostic> {
        Err(options.error("a test filter is never built"))
    }

    fn output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
        Err(options.error("a test output is never built"))
    }

    fn decoder(source: &str) -> Box<dyn StreamDecoder> {
        Box::new(NdjsonDecoder::new(source, 1024))
    }

    fn exit_zero(_: WrapRequest) -> BoxFuture<Result<i32, WrapError>> {
        Box::pin(async { Ok(0) })
    }

    fn options() -> schemars::Schema {
        options_of::<()>()
    }

    /// The kind of an output type (a test fails on any other).
    fn kind(c: &ComponentType) -> OutputKind {
        match c.role {
            Role::Output(kind) => kind,
            _ => panic!("{} is not an output", c.name),
        }
    }

    // Constants: the constructors and modifiers are what descriptors are written with.
    const PLAIN: ComponentType = ComponentType::output("plain", "one way", output, options);
    const TWO_WAY: ComponentType =
        ComponentType::output("two_way", "both ways", output, options).inbound();
    const LOSSY: ComponentType = ComponentType::output("lossy", "drops", output, options)
        .inbound()
        .when_full(WhenFull::DropNewest);
    const PROBES: &[Probe] = &[
        Probe::new("nothing", |_| Box::pin(async { None })),
        Probe::new("often", |_| Box::pin(async { None })).rescan(Duration::from_secs(1)),
    ];

    #[test]
    fn an_output_is_one_way_and_blocks_unless_told_otherwise() {
        let plain = kind(&PLAIN);
        assert!(!plain.inbound);
        assert_eq!(plain.when_full, WhenFull::Block);
        let two_way = kind(&TWO_WAY);
        assert!(two_way.inbound);
        assert_eq!(two_way.when_full, WhenFull::Block);
        let lossy = kind(&LOSSY);
        assert!(lossy.inbound);
        assert_eq!(lossy.when_full, WhenFull::DropNewest);
        assert_eq!((LOSSY.name, LOSSY.summary), ("lossy", "drops"));
    }

    #[test]
    fn each_constructor_declares_its_role() {
        let types = [
            ComponentType::source("s", "a source", source, options),
            ComponentType::filter("f", "a filter", filter, options),
            PLAIN,
            ComponentType::link("l", "a link", source, output, options),
        ];
        let sections: Vec<_> = types.iter().map(|c| c.role.sections()).collect();
        assert_eq!(sections, ["source", "filter", "output", "source, output"]);
    }

    #[test]
    fn an_adapter_is_its_components_alone_unless_told_otherwise() {
        const BARE: Adapter = Adapter::new("bare", "nothing else", &[PLAIN]);
        assert_eq!(
            (BARE.name, BARE.protocol, BARE.summary),
            ("bare", "bare", "nothing else")
        );
        assert_eq!(BARE.components.len(), 1);
        assert!(BARE.parse.is_none() && BARE.wrap.is_none() && BARE.probes.is_empty());

        const FULL: Adapter = Adapter::new("full", "everything", &[])
            .protocol("other")
            .parse(decoder)
            .wrap(exit_zero)
            .probes(PROBES);
        assert_eq!((FULL.name, FULL.protocol), ("full", "other"));
        assert!(FULL.parse.is_some() && FULL.wrap.is_some());
        let probes: Vec<_> = FULL.probes.iter().map(|p| (p.service, p.rescan)).collect();
        assert_eq!(
            probes,
            [("nothing", None), ("often", Some(Duration::from_secs(1)))]
        );
    }
}
