//! A component that is the same program on either side of the graph: as a source (listen
//! only) and as an output (controls in, and what it hears out of `NAME.inbound`). An agent
//! adapter writes how it runs on a [`LinkEnds`] once ([`TwoWay`]); [`TwoWayComponent`]
//! makes it both components.

use std::future::Future;

use patchbay_graph::{
    BoxFuture, ComponentError, LinkEnds, Output, OutputContext, Source, SourceContext,
};

/// What a two-way component is: its type and how it runs on whichever ends it has.
pub trait TwoWay: Send + 'static {
    /// The component type, the prefix of its signals' source (`codex` → `codex:NAME`).
    const TYPE: &'static str;

    /// Runs it, its signals from `source`, until it ends or the graph shuts down.
    fn run(
        self,
        source: String,
        side: LinkEnds<'_>,
    ) -> impl Future<Output = Result<(), ComponentError>> + Send;
}

/// A [`TwoWay`] as a graph component: build it as a source or as an output.
#[derive(Debug, Clone)]
pub struct TwoWayComponent<T>(pub T);

impl<T: TwoWay> TwoWayComponent<T> {
    /// `config` as a listen-only source.
    pub fn source(config: T) -> Box<dyn Source> {
        Box::new(TwoWayComponent(config))
    }

    /// `config` as an output (two-way when declared so).
    pub fn output(config: T) -> Box<dyn Output> {
        Box::new(TwoWayComponent(config))
    }
}

/// The signals' source of component `name` of type `T`.
fn source_of<T: TwoWay>(name: &str) -> String {
    format!("{}:{name}", T::TYPE)
}

impl<T: TwoWay> Source for TwoWayComponent<T> {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = source_of::<T>(cx.name());
            self.0.run(source, LinkEnds::source(&cx)).await
        })
    }
}

impl<T: TwoWay> Output for TwoWayComponent<T> {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = source_of::<T>(cx.name());
            self.0.run(source, LinkEnds::output(&cx)).await
        })
    }
}
