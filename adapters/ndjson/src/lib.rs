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

use patchbay_graph::{Adapter, ComponentType, options_of};
use patchbay_signal::decode::NdjsonDecoder;

/// The default `max_line_bytes`: 1 MiB, as the `sse` source's.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// The largest `max_line_bytes` accepted: 64 MiB, as the `sse` source's.
pub const MAX_LINE_BYTES_LIMIT: usize = 64 << 20;

/// The `file` and `stdin` sources and the `stdout` and `file` outputs.
pub const ADAPTER: Adapter = Adapter::new(
    "ndjson",
    "newline-delimited JSON envelopes: files, standard input and output",
    &[
        ComponentType::source(
            "file",
            "read signals from an NDJSON file, or replay a recorded scenario",
            source::build_file,
            options_of::<FileSourceConfig>,
        ),
        ComponentType::source(
            "stdin",
            "read NDJSON signals piped on standard input",
            source::build_stdin,
            options_of::<StdinConfig>,
        ),
        ComponentType::output(
            "stdout",
            "write signals to standard output (readable on a terminal, NDJSON when piped)",
            output::build_stdout,
            options_of::<StdoutConfig>,
        ),
        ComponentType::output(
            "file",
            "append signals to an NDJSON file",
            output::build_file,
            options_of::<FileOutputConfig>,
        ),
    ],
)
.protocol("sajou")
.parse(parse_decoder);

/// The decoder `patchbay parse --protocol sajou` drives: generic NDJSON envelopes, lines
/// up to [`DEFAULT_MAX_LINE_BYTES`].
pub fn parse_decoder(source: &str) -> Box<dyn patchbay_signal::decode::StreamDecoder> {
    Box::new(NdjsonDecoder::new(source, DEFAULT_MAX_LINE_BYTES))
}
