//! `patchbay discover [--json]`.

use std::process::ExitCode;

use crate::discovery::{DiscoveryConfig, discover, render_table};

/// Probes the local services and MIDI ports; prints a table, or JSON.
pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let config = DiscoveryConfig {
        midi: crate::pipeline::midi_lister(),
        ..DiscoveryConfig::default()
    };
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
