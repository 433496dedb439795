//! `patchbay discover [--json]`.

use std::process::ExitCode;

use crate::discovery::{ProbeContext, discover, render_table};

/// Runs every adapter's probe; prints a table, or JSON.
pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let probes: Vec<_> = crate::pipeline::probes()
        .into_iter()
        .map(|probe| (probe, ProbeContext::default()))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let services = runtime.block_on(discover(&probes));
    // A MIDI listing that timed out may still be running: do not wait for it.
    runtime.shutdown_background();
    if json {
        println!("{}", serde_json::to_string_pretty(&services)?);
    } else {
        print!("{}", render_table(&services));
    }
    Ok(ExitCode::SUCCESS)
}
