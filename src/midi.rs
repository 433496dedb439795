//! `patchbay midi list|monitor|learn`.

use std::process::ExitCode;

use patchbay_midi::InputOptions;
use patchbay_signal::normalize::Decoded;

/// `patchbay midi list`: the ports, or why there is no MIDI system.
pub fn list(json: bool) -> anyhow::Result<ExitCode> {
    match patchbay_midi::list_ports() {
        Ok(ports) if json => {
            println!("{}", serde_json::to_string(&ports)?);
            Ok(ExitCode::SUCCESS)
        }
        Ok(ports) => {
            print!("{ports}");
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("patchbay: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?)
}

/// `patchbay midi monitor [PORT]`: decoded messages as NDJSON signals until Ctrl-C.
pub fn monitor(port: Option<&str>, system: bool) -> anyhow::Result<ExitCode> {
    let mut options = InputOptions::port(port);
    options.decoder.system = system;
    let result = runtime()?.block_on(async {
        tokio::select! {
            result = patchbay_midi::monitor(&options, |decoded| {
                let signal = match decoded {
                    Decoded::Signal(s) | Decoded::BadInput(s) => s,
                };
                println!("{}", signal.to_json());
            }) => result,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    });
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("patchbay: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `patchbay midi learn [PORT] [--source NAME] [--target TYPE]`: waits for a pad or knob and
/// prints the filter block.
pub fn learn(port: Option<&str>, source: &str, target: &str) -> anyhow::Result<ExitCode> {
    let options = InputOptions::port(port);
    eprintln!("patchbay: press a pad or key, or move a knob (Ctrl-C to give up)");
    let result = runtime()?.block_on(async {
        tokio::select! {
            result = patchbay_midi::learn(&options, source, target) => result.map(Some),
            _ = tokio::signal::ctrl_c() => Ok(None),
        }
    });
    match result {
        Ok(Some(block)) => {
            print!("{block}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(None) => Ok(ExitCode::FAILURE),
        Err(err) => {
            eprintln!("patchbay: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}
