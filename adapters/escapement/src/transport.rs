//! The WebSocket transport: `type = "escapement"` as a source (listen only) and as a
//! two-way output (controls out, frames in through `NAME.inbound`).

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::{ComponentError, Diagnostic, LinkEnds, Options, Output, Source};
use patchbay_signal::SharedSignal;
use patchbay_signal::normalize::Decoded;
use patchbay_transport::two_way::{TwoWay, TwoWayComponent};
use patchbay_transport::{
    Defaults, Driver, Ended, Link, Scheme, TransportConfig, TransportOptions, WsStream,
    close_reason, parse_options,
};
use serde::Deserialize;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::decode::EscapementDecoder;
use crate::encode::encode_control;
use crate::replay::ReplayGuard;
use patchbay_signal::decode::FrameDecoder as _;

/// Escapement's transport defaults: `url` required, retry forever.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct EscapementDefaults;

impl Defaults for EscapementDefaults {
    const SCHEME: Scheme = Scheme::WebSocket;
    const URL_EXAMPLE: &'static str = "ws://HOST:PORT/PATH";
}

/// `[outputs.NAME]` (two-way) or `[sources.NAME]` (listen only) with `type =
/// "escapement"`: one WebSocket connection to an Escapement agent.
///
/// Declared under `[outputs]`, its queue (`queue`, default 1024 signals) keeps taking
/// controls while the agent is away and sends them once it is back; when it overflows the
/// oldest control is dropped and counted (`dropped`). `when_full` defaults to
/// `drop_oldest` for this reason: `block` would stall the whole graph while the agent
/// reconnects.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct EscapementConfig {
    /// Connecting and reconnecting: `url` (the agent's `ws://HOST:PORT/PATH`, or `wss://`),
    /// `backoff_initial_ms` (default 1000), `backoff_max_ms` (default 30000),
    /// `max_attempts` (default: retry forever), `connect_timeout_ms` (default 10000),
    /// `ca_file`.
    #[serde(flatten)]
    pub transport: TransportOptions<EscapementDefaults>,
}

impl TransportConfig for EscapementConfig {
    type Defaults = EscapementDefaults;
    fn transport(&self) -> &TransportOptions<EscapementDefaults> {
        &self.transport
    }
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(TwoWayComponent::source(parse_options::<EscapementConfig>(
        options,
    )?))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(TwoWayComponent::output(parse_options::<EscapementConfig>(
        options,
    )?))
}

/// One agent connection; the same runs as a source or as an output.
impl TwoWay for EscapementConfig {
    const TYPE: &'static str = "escapement";

    async fn run(self, source: String, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        let mut link = EscapementLink::new(self, source);
        Driver::new(Self::TYPE, &link.config.transport, side)
            .run(&mut link)
            .await
    }
}

/// The state kept across reconnections: the decoder (with its seq dedupe), the replay
/// guard, and a control signal not yet sent when the socket broke.
struct EscapementLink {
    config: EscapementConfig,
    decoder: EscapementDecoder,
    guard: ReplayGuard,
    unsent: Option<SharedSignal>,
}

impl Link for EscapementLink {
    type Connection = WsStream;

    async fn connect(&mut self, _ends: &LinkEnds<'_>) -> Result<WsStream, Ended> {
        let ws = self.config.transport.open_websocket([]).await?;
        self.guard.reconnected();
        Ok(ws)
    }

    async fn session(&mut self, ws: WsStream, ends: &LinkEnds<'_>) -> Ended {
        self.talk(ws, ends).await
    }
}

impl EscapementLink {
    fn new(config: EscapementConfig, source: String) -> Self {
        EscapementLink {
            config,
            decoder: EscapementDecoder::new(source),
            guard: ReplayGuard::new(),
            unsent: None,
        }
    }

    /// Talks on one connection until it ends (an output: until the graph ends; a
    /// listen-only link is ended by the driver at shutdown).
    async fn talk(&mut self, ws: WsStream, side: &LinkEnds<'_>) -> Ended {
        let (mut sink, mut stream) = ws.split();
        // A control that was taken from the queue when the last socket broke goes first.
        if let Some(signal) = self.unsent.take()
            && let Err(reason) = self.send_control(&mut sink, signal, side).await
        {
            return Ended::Lost(reason);
        }
        let mut out = Vec::new();
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(Ok(Message::Text(text))) => {
                        self.decode(text.as_str(), &mut out);
                        if side.emit_all(&mut out).await.is_err() {
                            return Ended::Stop;
                        }
                    }
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) => {
                            self.decode(text, &mut out);
                            if side.emit_all(&mut out).await.is_err() {
                                return Ended::Stop;
                            }
                        }
                        Err(_) => side.record_error("escapement: a binary frame that is not UTF-8 was ignored"),
                    },
                    Some(Ok(Message::Close(frame))) => {
                        return Ended::Lost(format!("the agent closed the connection{}", close_reason(frame.as_ref())));
                    }
                    Some(Ok(_)) => {} // ping/pong are answered by tungstenite
                    Some(Err(e)) => return Ended::Lost(format!("connection lost: {e}")),
                    None => return Ended::Lost("connection lost".into()),
                },
                signal = side.next_control() => match signal {
                    Some(signal) => {
                        if let Err(reason) = self.send_control(&mut sink, signal, side).await {
                            return Ended::Lost(reason);
                        }
                    }
                    None => {
                        // The graph ended: say goodbye properly.
                        let _ = sink.send(Message::Close(None)).await;
                        return Ended::Stop;
                    }
                },
            }
        }
    }

    /// Encodes and sends one control signal; a refused type is counted, a send failure
    /// keeps the signal for the next connection.
    async fn send_control<K>(
        &mut self,
        sink: &mut K,
        signal: SharedSignal,
        side: &LinkEnds<'_>,
    ) -> Result<(), String>
    where
        K: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
    {
        let Some(cx) = side.controls else {
            return Ok(());
        };
        match encode_control(&signal) {
            Ok(frame) => match sink.send(Message::text(frame.to_string())).await {
                Ok(()) => {
                    // The latency probe's end: the frame is written to the socket.
                    tracing::trace!(target: "patchbay::latency", stage = "escapement.sent");
                    cx.delivered(1);
                    Ok(())
                }
                Err(e) => {
                    self.unsent = Some(signal);
                    Err(format!("sending a control failed: {e}"))
                }
            },
            Err(e) => {
                cx.refused(format!("{}: {e}", signal.kind));
                Ok(())
            }
        }
    }

    /// Decodes one text frame through the replay guard and the decoder.
    fn decode(&mut self, text: &str, out: &mut Vec<Decoded>) {
        match serde_json::from_str::<Value>(text.trim()) {
            Ok(frame) => {
                for frame in self.guard.admit(frame, self.decoder.dedupe_mut()) {
                    self.decoder.decode_frame(frame, None, out);
                }
            }
            // Not JSON: the decoder reports it as bad input.
            Err(_) => self.decoder.decode_text(text, out),
        }
    }
}
