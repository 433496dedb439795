//! What `patchbay midi monitor` and `patchbay midi learn` run: an input followed across
//! hot-plug, as for the source, without a graph.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;

use crate::input::{Event, InputDriver, Status};
use crate::source::DEFAULT_RESCAN_MS;
use crate::system::{DEFAULT_CLIENT_NAME, MidiError};
use crate::{DecoderConfig, MidiDecoder, PortMatcher, learn_block, types};

/// The options of `patchbay midi monitor` and `patchbay midi learn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputOptions {
    /// The port (full name or unanchored regex); `None`: the first port that is not
    /// patchbay's own.
    pub port: Option<String>,
    /// Decoding options (channel filter, system messages).
    pub decoder: DecoderConfig,
    /// How often the port list is checked, ms.
    pub rescan_ms: u64,
    /// The MIDI client name.
    pub client_name: String,
}

impl Default for InputOptions {
    fn default() -> Self {
        InputOptions {
            port: None,
            decoder: DecoderConfig::default(),
            rescan_ms: DEFAULT_RESCAN_MS,
            client_name: DEFAULT_CLIENT_NAME.to_owned(),
        }
    }
}

impl InputOptions {
    /// Options for `port` with the defaults otherwise.
    pub fn port(port: Option<&str>) -> Self {
        InputOptions {
            port: port.map(str::to_owned),
            ..InputOptions::default()
        }
    }

    fn driver(&self, local_port: &str) -> Result<(InputDriver, String), MidiError> {
        crate::system::check_client_name(&self.client_name)?;
        let pattern = self.port.clone().unwrap_or_else(|| ".".to_owned());
        let matcher = PortMatcher::new(&pattern)?;
        let driver = InputDriver::new(
            matcher,
            &self.client_name,
            local_port,
            Duration::from_millis(self.rescan_ms.max(1)),
            Arc::new(|| {}),
        );
        Ok((driver, pattern))
    }
}

/// Watches an input port and hands every decoded message to `on_signal` (bad input
/// included, as the `error` signal a source would emit), following the port across
/// hot-plug. Signals have source `midi:monitor`.
///
/// Runs until the future is dropped (the CLI stops it on Ctrl-C). Fails at once when the
/// pattern is invalid or the first scan finds no MIDI system; later losses (the device
/// unplugged, the JACK server gone) are logged with `tracing` and waited out.
pub async fn monitor(
    options: &InputOptions,
    mut on_signal: impl FnMut(Decoded),
) -> Result<(), MidiError> {
    let never = follow(options, "monitor", |decoded| {
        on_signal(decoded);
        None::<Infallible>
    })
    .await?;
    match never {}
}

/// Waits for the next pad, key, knob or program change on the input and returns the
/// `[filters.…]` block that maps it to a `target` signal (see [`learn_block`]), for a
/// config whose MIDI source is named `source`. Note-offs and other messages are skipped.
///
/// Fails at once when the pattern is invalid or there is no MIDI system; otherwise waits
/// (across hot-plug) until something is pressed. Wrap it in `tokio::time::timeout` for a
/// time limit.
pub async fn learn(
    options: &InputOptions,
    source: &str,
    target: &str,
) -> Result<String, MidiError> {
    follow(options, "learn", |decoded| match decoded {
        Decoded::Signal(signal) if is_learnable(&signal) => {
            learn_block(&signal, source, target).ok()
        }
        _ => None,
    })
    .await
}

/// Follows the input across hot-plug as the tool `tool` (its local port's name, and the
/// signals' source `midi:TOOL`), handing each decoded message to `on_decoded` until it
/// returns a value. Fails at once when the pattern is invalid or the first scan finds no
/// MIDI system; later losses are logged and waited out.
async fn follow<T>(
    options: &InputOptions,
    tool: &str,
    mut on_decoded: impl FnMut(Decoded) -> Option<T>,
) -> Result<T, MidiError> {
    let (mut driver, pattern) = options.driver(tool)?;
    let mut decoder = MidiDecoder::with_config(format!("midi:{tool}"), "", &options.decoder)
        .map_err(|e| MidiError::Ended(e.to_string()))?;
    let mut first = true;
    let mut last = None;
    let mut out = Vec::new();
    let result = 'wait: loop {
        match driver.next().await {
            Ok(Event::Message(message)) => {
                decoder.decode_message(message.raw.bytes(), message.at, &mut out);
                for decoded in out.drain(..) {
                    if let Some(done) = on_decoded(decoded) {
                        break 'wait Ok(done);
                    }
                }
            }
            Ok(Event::Status(status)) => {
                if let Status::Connected(port) = &status {
                    decoder.set_port(port.clone());
                }
                if let (true, Status::NoSystem(err)) = (first, &status) {
                    break Err(err.clone());
                }
                first = false;
                log_status(&status, &pattern, &mut last);
            }
            Err(err) => break Err(err),
        }
    };
    driver.close().await;
    result
}

/// Whether a signal names one control to learn: a press, a knob move, a program change.
fn is_learnable(signal: &Signal) -> bool {
    matches!(
        signal.kind.as_str(),
        types::NOTE_ON | types::CONTROL_CHANGE | types::PROGRAM_CHANGE
    )
}

/// Logs a status change (not the same status every rescan).
fn log_status(status: &Status, pattern: &str, last: &mut Option<String>) {
    let detail = status.detail(pattern);
    if last.as_deref() == Some(detail.as_str()) {
        return;
    }
    match status {
        Status::Connected(_) | Status::Still(_) | Status::Waiting(_) => {
            tracing::info!("MIDI: {detail}");
        }
        Status::Lost(_) | Status::NoSystem(_) | Status::OpenFailed(_) => {
            tracing::warn!("MIDI: {detail}");
        }
    }
    *last = Some(detail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;

    #[test]
    fn learnable_kinds() {
        let signal = |kind: &str| Signal::new(kind, "midi:x", object! {"channel" => 1});
        assert!(is_learnable(&signal("midi.note_on")));
        assert!(is_learnable(&signal("midi.control_change")));
        assert!(is_learnable(&signal("midi.program_change")));
        assert!(!is_learnable(&signal("midi.note_off")));
        assert!(!is_learnable(&signal("midi.clock")));
    }

    #[test]
    fn invalid_pattern_fails_at_once() {
        let options = InputOptions::port(Some("pad["));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = runtime.block_on(monitor(&options, |_| {})).unwrap_err();
        assert!(matches!(err, MidiError::Pattern(_)), "{err}");
    }
}
