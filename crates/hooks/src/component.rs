//! The component an agent's hook endpoint is: its options parsed from the config, and the
//! same value run as a source (listen only) or as a two-way output (`control.answer` in
//! for the gate).

use std::marker::PhantomData;

use patchbay_graph::approvals::GateConfig;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, LinkEnds, Options, Output, OutputContext, Source,
    SourceContext,
};

use crate::{EndpointOptions, HookAgent, Settings, serve};

/// Parses and checks an agent's options ([`EndpointOptions`]); an error points at the key
/// at fault.
pub fn parse_settings<A: HookAgent>(options: &Options<'_>) -> Result<Settings, Diagnostic> {
    options.refuse_unknown_keys(
        patchbay_transport::known_keys::<EndpointOptions<A>>()
            .iter()
            .map(String::as_str),
    )?;
    let config: EndpointOptions<A> = options.parse()?;
    config
        .check()
        .map_err(|(key, message)| options.error_at(key, message))
}

/// Builds the endpoint as a source: listen only, so a `gate` is refused.
pub fn build_source<A: HookAgent>(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let settings = parse_settings::<A>(options)?;
    GateConfig::refuse_on_a_source(settings.gate.as_ref(), options)?;
    Ok(Box::new(Endpoint::<A>::new(settings)))
}

/// Builds the endpoint as a two-way output.
pub fn build_output<A: HookAgent>(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let settings = parse_settings::<A>(options)?;
    Ok(Box::new(Endpoint::<A>::new(settings)))
}

/// One hook endpoint; the same value runs as a source or as an output.
struct Endpoint<A> {
    settings: Settings,
    agent: PhantomData<fn() -> A>,
}

impl<A> Endpoint<A> {
    fn new(settings: Settings) -> Self {
        Endpoint {
            settings,
            agent: PhantomData,
        }
    }
}

impl<A: HookAgent> Source for Endpoint<A> {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let agent = A::new(cx.name());
            serve(agent, self.settings, LinkEnds::source(&cx)).await
        })
    }
}

impl<A: HookAgent> Output for Endpoint<A> {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let agent = A::new(cx.name());
            serve(agent, self.settings, LinkEnds::output(&cx)).await
        })
    }
}
