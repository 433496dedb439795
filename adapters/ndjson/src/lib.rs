//! patchbay's NDJSON ends: the `file` and `stdin` sources and the `stdout` and `file`
//! outputs.
//!
//! Input lines are decoded as generic envelopes (an object with a string `type` is an
//! envelope, one without is an `event` with the object as payload): a bad line becomes an
//! `error` signal and a bad-input count, never a crash. Outputs write one JSON envelope per
//! line.

mod output;
mod source;

pub use output::{FileOutputConfig, LineFormat, StdoutConfig};
pub use source::{FileFormat, FileSourceConfig, StdinConfig};

use patchbay_graph::{OutputKind, Registry, WhenFull};

/// Registers `file` and `stdin` sources and `stdout` and `file` outputs.
pub fn register(registry: &mut Registry) {
    registry
        .source("file", source::build_file)
        .source("stdin", source::build_stdin)
        .output(
            "stdout",
            OutputKind {
                build: output::build_stdout,
                inbound: false,
                when_full: WhenFull::Block,
            },
        )
        .output(
            "file",
            OutputKind {
                build: output::build_file,
                inbound: false,
                when_full: WhenFull::Block,
            },
        );
}
