//! The `osc` source and output: Open Sound Control over UDP, the way a phone or a tablet
//! (TouchOSC, Open Stage Control), TouchDesigner, Max, Pure Data, Resolume or a lighting
//! desk becomes a control surface.
//!
//! The pure part (no sockets):
//!
//! - [`parse_packet`] reads one datagram into the [`Packet`] model (OSC 1.0, plus the
//!   common 1.1 types), bounded, with a typed error ([`OscError`]) naming what is wrong;
//!   [`OscDecoder`] turns a packet into `osc.message` signals, or into one `error` signal.
//! - [`encode_message`], [`encode_bundle`] and [`encode_packet`] write packets;
//!   [`args_of`] turns a signal's JSON values into arguments.
//! - [`parse_decoder`]: `patchbay parse --protocol osc` (one packet per line, as hex).
//!
//! The transport (tokio's UDP socket):
//!
//! - the `osc` source ([`OscSourceConfig`]): `listen` (loopback by default; any other
//!   address needs `allowed_peers`), `max_packet`; malformed and oversized packets are
//!   counted (`bad_input`, and the gauges `osc_malformed`, `osc_oversized`), packets from
//!   other senders dropped and counted (`osc_refused_peers`), and the kernel's drops of a
//!   full receive buffer shown (`osc_kernel_drops`, Linux).
//! - the `osc` output ([`OscOutputConfig`]): `target` (one `host:port` or several), an
//!   `address` template and `args` paths or literals, `bundle` to send a batch as bundles.
//!
//! Turning addresses into controls is the graph's work, with the generic filters: a
//! `route` or `when` on `payload.address`, then a `map` to `control.pause`,
//! `control.step`, `control.answer` (see `pipelines/phone-osc.toml` and `docs/osc.md`).
//!
//! # Signals
//!
//! Each message, alone or in a bundle (bundles unpacked in order, nested ones too), is one
//! signal of type `osc.message`, source `osc:NAME`, stamped with the time it was received:
//!
//! ```json
//! {"type": "osc.message", "source": "osc:phone",
//!  "payload": {"address": "/agent/pause", "args": [1.0], "tags": "f"},
//!  "metadata": {"peer": "192.168.1.50:53211"}}
//! ```
//!
//! `tags` are the OSC type tags (`[` and `]` around an array); a message from a bundle has
//! the bundle's `timetag` too. Arguments as JSON:
//!
//! | tag | OSC type                    | JSON                                          |
//! |-----|-----------------------------|-----------------------------------------------|
//! | `i` `h` | 32/64-bit integer       | number                                        |
//! | `f` `d` | 32/64-bit float         | number (`f` with the digits a person would write: `0.3`); NaN and infinities `null` |
//! | `s` `S` | string, symbol          | string                                        |
//! | `c` | character                   | string of one character                       |
//! | `b` | blob                        | base64 string                                 |
//! | `t` | time tag                    | `{seconds, fraction, unixMs}` or `{seconds: 0, fraction: 1, immediate: true}` |
//! | `r` | RGBA color                  | `{r, g, b, a}`                                |
//! | `m` | MIDI message                | `{port, status, data1, data2}`                |
//! | `T` `F` | true, false             | `true`, `false`                               |
//! | `N` `I` | nil, impulse            | `null`                                        |
//! | `[` … `]` | array                 | array                                         |
//!
//! A refused packet is one `error` signal (`code: "bad_frame"`, the reason in `message`,
//! the first bytes as hex in `metadata.raw`, the sender in `metadata.peer`).

mod decode;
mod encode;
mod kernel_drops;
mod output;
mod packet;
mod parse;
mod peers;
mod source;

pub use decode::{
    Limits, MESSAGE_TYPE, OscDecoder, OscError, Part, for_each_message, parse_packet,
    parse_packet_with, to_hex,
};
pub use encode::{
    ArgType, BUNDLE_HEADER, EncodeError, MAX_ARRAY_DEPTH, arg_of, args_of, encode_bundle,
    encode_message, encode_packet,
};
pub use kernel_drops::kernel_drops;
pub use output::{
    AddressTemplate, ArgEntry, MAX_SEND_PACKET, MessageTemplate, OscOutputConfig, RenderError,
    Targets,
};
pub use packet::{Arg, Bundle, Message, Packet, TimeTag};
pub use parse::parse_decoder;
pub use peers::{AllowedPeers, Network, NetworkError};
pub use source::{
    DEFAULT_LISTEN, DEFAULT_MAX_PACKET, MAX_PACKET_LIMIT, MIN_PACKET, OscSourceConfig,
    SOURCE_GAUGES, SourceSettings,
};

use patchbay_graph::{Adapter, ComponentType, options_of};

/// The `osc` source and output (which blocks when full, as MIDI's does: a control
/// surface's state is not dropped on the way), and the decoder of `patchbay parse
/// --protocol osc`.
pub const ADAPTER: Adapter = Adapter::new(
    "osc",
    "OSC over UDP: phones and tablets (TouchOSC, Open Stage Control), TouchDesigner, Max, Pd, lighting desks",
    &[
        ComponentType::source(
            "osc",
            "receive OSC packets on a UDP port: each message an `osc.message`",
            source::build,
            options_of::<OscSourceConfig>,
        ),
        ComponentType::output(
            "osc",
            "send signals as OSC messages (address template, args) to UDP targets",
            output::build,
            options_of::<OscOutputConfig>,
        ),
    ],
).parse(parse_decoder);
