//! `patchbay parse`: decode a capture into NDJSON signals.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use patchbay_graph::config::suggestion;
use patchbay_signal::decode::StreamDecoder;

use crate::pipeline::ADAPTERS;

/// The decoder of `protocol`, from the adapter that speaks it.
pub fn decoder(protocol: &str) -> Option<Box<dyn StreamDecoder>> {
    let parse = ADAPTERS
        .iter()
        .find(|a| a.protocol == protocol)
        .and_then(|a| a.parse)?;
    Some(parse(&format!("parse:{protocol}")))
}

/// The protocols `parse` knows.
pub fn protocols() -> impl Iterator<Item = &'static str> {
    ADAPTERS
        .iter()
        .filter(|a| a.parse.is_some())
        .map(|a| a.protocol)
}

/// `patchbay parse`.
pub fn parse(protocol: &str, file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let Some(mut decoder) = decoder(protocol) else {
        let known: Vec<&str> = protocols().collect();
        bail!(
            "unknown protocol `{protocol}`{}; known: {}",
            suggestion(protocol, known.iter().copied()),
            known.join(", ")
        );
    };
    let mut input: Box<dyn Read> = match file {
        Some(path) => {
            Box::new(std::fs::File::open(path).with_context(|| format!("{}", path.display()))?)
        }
        None => Box::new(std::io::stdin().lock()),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut buf = vec![0u8; 64 * 1024];
    let mut decoded = Vec::new();
    let mut bad = 0usize;
    loop {
        let n = input.read(&mut buf).context("reading input")?;
        if n == 0 {
            decoder.finish(&mut decoded);
        } else {
            decoder.feed(&buf[..n], &mut decoded);
        }
        for d in decoded.drain(..) {
            bad += usize::from(d.is_bad());
            let line = d.into_signal().to_json();
            if writeln!(out, "{line}").is_err() {
                return Ok(ExitCode::SUCCESS);
            }
        }
        if n == 0 {
            break;
        }
    }
    out.flush().ok();
    if bad > 0 {
        eprintln!("patchbay parse: {bad} bad input(s), reported as error signals");
    }
    Ok(ExitCode::SUCCESS)
}
