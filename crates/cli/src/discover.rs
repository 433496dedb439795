//! `patchbay discover [--json]`.

use std::process::ExitCode;
use std::sync::Arc;

use patchbay_discovery::{DiscoveryConfig, discover, render_table};

/// Probes the local services and MIDI ports; prints a table, or JSON.
pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let config = DiscoveryConfig::with_midi(Arc::new(|| {
        patchbay_midi::list_ports()
            .map(|ports| patchbay_discovery::MidiListing {
                system: ports.backend.to_owned(),
                inputs: ports.inputs,
                outputs: ports.outputs,
            })
            .map_err(|err| err.to_string())
    }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let services = runtime.block_on(discover(&config));
    // A MIDI listing that timed out may still be running: do not wait for it.
    runtime.shutdown_background();
    if json {
        println!("{}", serde_json::to_string_pretty(&services)?);
    } else {
        print!("{}", render_table(&services));
    }
    Ok(ExitCode::SUCCESS)
}
