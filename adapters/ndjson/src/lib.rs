//! patchbay's NDJSON ends: the `file` and `stdin` sources and the `stdout` and `file`
//! outputs.
//!
//! Input lines are decoded as generic envelopes (an object with a string `type` is an
//! envelope, one without is an `event` with the object as payload): a bad line becomes an
//! `error` signal and a bad-input count, never a crash; so does a line longer than
//! `max_line_bytes` (1 MiB by default), which is skipped up to its newline without being
//! kept in memory. Outputs write one JSON envelope per line.

mod output;
mod source;

pub use output::{FileOutputConfig, LineFormat, StdoutConfig};
pub use source::{FileFormat, FileSourceConfig, StdinConfig};

use patchbay_graph::{Adapter, ComponentType, OutputKind, Role, WhenFull, options_of};
use patchbay_signal::decode::NdjsonDecoder;

/// The default `max_line_bytes`: 1 MiB, as the `sse` source's.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// The largest `max_line_bytes` accepted: 64 MiB, as the `sse` source's.
pub const MAX_LINE_BYTES_LIMIT: usize = 64 << 20;

/// The `file` and `stdin` sources and the `stdout` and `file` outputs.
pub const ADAPTER: Adapter = Adapter {
    name: "ndjson",
    protocol: "sajou",
    summary: "newline-delimited JSON envelopes: files, standard input and output",
    components: &[
        ComponentType {
            name: "file",
            summary: "read signals from an NDJSON file, or replay a recorded scenario",
            role: Role::Source(source::build_file),
            options: options_of::<FileSourceConfig>,
        },
        ComponentType {
            name: "stdin",
            summary: "read NDJSON signals piped on standard input",
            role: Role::Source(source::build_stdin),
            options: options_of::<StdinConfig>,
        },
        ComponentType {
            name: "stdout",
            summary: "write signals to standard output (readable on a terminal, NDJSON when piped)",
            role: Role::Output(OutputKind {
                build: output::build_stdout,
                inbound: false,
                when_full: WhenFull::Block,
            }),
            options: options_of::<StdoutConfig>,
        },
        ComponentType {
            name: "file",
            summary: "append signals to an NDJSON file",
            role: Role::Output(OutputKind {
                build: output::build_file,
                inbound: false,
                when_full: WhenFull::Block,
            }),
            options: options_of::<FileOutputConfig>,
        },
    ],
    parse: Some(parse_decoder),
    wrap: None,
    probes: &[],
};

/// The decoder `patchbay parse --protocol sajou` drives: generic NDJSON envelopes, lines
/// up to [`DEFAULT_MAX_LINE_BYTES`].
pub fn parse_decoder(source: &str) -> Box<dyn patchbay_signal::decode::StreamDecoder> {
    Box::new(NdjsonDecoder::new(source, DEFAULT_MAX_LINE_BYTES))
}
