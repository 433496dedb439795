//! The JSON terminal escapes adapter (OSC 23198 program→terminal, 23199
//! terminal→program): any CLI agent can emit signals with one `printf`.
//!
//! `patchbay wrap --protocol jte -- COMMAND…` runs a program in a pseudo-terminal, passes
//! its output through to the user's terminal with the escapes removed, and turns each
//! command into a signal; `control.*` signals go back to the program as OSC 23199
//! commands on its input.
//!
//! - [`parser`]: the streaming byte parser ([`JteParser`]): output bytes in, passthrough
//!   bytes and decoded escapes out, split anywhere.
//! - [`signals`]: commands → signals ([`command_signal`], [`JteDecoder`]).
//! - [`encode`]: control signals → OSC 23199 bytes ([`encode_control`]).
//!
//! Everything above is pure: no I/O. The transport is [`wrap()`] (`patchbay wrap --protocol
//! jte`, see the [`wrap`](mod@wrap) module), over [`pty`].
//!
//! ```
//! use patchbay_jte::JteParser;
//! let mut parser = JteParser::new();
//! let out = parser.feed(b"hi \x1b]23198;0;{\"command\":\"text_delta\",\"data\":{\"content\":\"x\"}}\x07there");
//! assert_eq!(out.passthrough, b"hi there");
//! assert_eq!(out.events.len(), 1);
//! ```

pub mod encode;
pub mod parser;
pub mod pty;
pub mod signals;
pub mod wrap;

use patchbay_graph::{Adapter, BoxFuture, WrapRequest};
use patchbay_signal::decode::StreamDecoder;

pub use encode::{EncodeError, control_command_name, encode_control, encode_escape};
pub use parser::{
    DEFAULT_MAX_PAYLOAD, JteCommand, JteError, JteErrorKind, JteEvent, JteOutput, JteParser,
    OSC_TO_PROGRAM, OSC_TO_TERMINAL,
};
pub use signals::{JteDecoder, JteSignals, command_signal};
pub use wrap::{DEFAULT_TO, WrapError, WrapOptions, wrap, wrap_with};

/// The decoder of `patchbay parse --protocol jte` and the wrapper of `patchbay wrap
/// --protocol jte`.
pub const ADAPTER: Adapter = Adapter::new(
    "jte",
    "JSON terminal escapes: a program's signals from its terminal output",
    &[],
)
.parse(parse_decoder)
.wrap(wrap_request);

/// `patchbay wrap --protocol jte`: [`wrap_with`] on the request.
fn wrap_request(
    request: WrapRequest,
) -> BoxFuture<Result<i32, patchbay_graph::descriptor::WrapError>> {
    let mut options = WrapOptions::new(request.command, request.to);
    options.name = request.name;
    Box::pin(async move { wrap_with(options).await.map_err(Into::into) })
}

/// The decoder `patchbay parse --protocol jte` drives: raw terminal output bytes in,
/// signals out (the passthrough output is dropped).
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(JteDecoder::new(source))
}
