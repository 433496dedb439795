//! A test output that keeps the running graph's telemetry, to read health states.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, Options, Output, OutputContext, Telemetry,
};

/// The telemetry of the running graph, kept by the probe output (one graph per test
/// binary at a time).
static TELEMETRY: Mutex<Option<Arc<Telemetry>>> = Mutex::new(None);

/// The telemetry of the running graph, once its probe runs.
pub fn telemetry() -> Option<Arc<Telemetry>> {
    TELEMETRY.lock().ok().and_then(|t| t.clone())
}

/// The probe output.
pub struct Probe;

impl Output for Probe {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            if let Ok(mut t) = TELEMETRY.lock() {
                *t = Some(cx.telemetry().clone());
            }
            while cx.next().await.is_some() {}
            Ok(())
        })
    }
}

/// Builds the probe.
pub fn build_probe(_: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Probe))
}
