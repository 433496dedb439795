//! `patchbay parse`: decode a capture into NDJSON signals.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use patchbay_signal::decode::{NdjsonDecoder, StreamDecoder};

/// The protocols `parse` knows, with their decoders.
pub fn decoder(protocol: &str) -> Option<Box<dyn StreamDecoder>> {
    let source = format!("parse:{protocol}");
    Some(match protocol {
        "sajou" => Box::new(NdjsonDecoder::new(source)),
        "sse" => patchbay_sse::parse_decoder(&source),
        "openai" => patchbay_openai::parse_decoder(&source),
        "anthropic" => patchbay_anthropic::parse_decoder(&source),
        "openclaw" => patchbay_openclaw::parse_decoder(&source),
        "escapement" => patchbay_escapement::parse_decoder(&source),
        "codelia" => patchbay_codelia::parse_decoder(&source),
        "palyra" => patchbay_palyra::parse_decoder(&source),
        "jte" => patchbay_jte::parse_decoder(&source),
        "midi" => patchbay_midi::parse_decoder(&source),
        _ => return None,
    })
}

/// Protocol names, for the error on an unknown one.
const PROTOCOLS: &[&str] = &[
    "sajou",
    "sse",
    "openai",
    "anthropic",
    "openclaw",
    "escapement",
    "codelia",
    "palyra",
    "jte",
    "midi",
];

pub fn parse(protocol: &str, file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let Some(mut decoder) = decoder(protocol) else {
        bail!(
            "unknown protocol `{protocol}`; known: {}",
            PROTOCOLS.join(", ")
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
