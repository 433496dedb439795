//! The sidecar's ingest: `POST /signal` bodies (`body_to_signals`), WebSocket text frames
//! from UIs (`ui_frame_to_signal`: envelopes and the Escapement back-channel), and the
//! `tap` client's reading of what the sidecar sends (`readable_line`).
#![no_main]

use patchbay_server::tap::readable_line;
use patchbay_server::{body_to_signals, ui_frame_to_signal};
use patchbay_signal::normalize::Normalizer;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut normalizer = Normalizer::new(patchbay_fuzz::SOURCE);
    if let Ok(signals) = body_to_signals(&mut normalizer, data) {
        signals
            .iter()
            .for_each(|signal| patchbay_fuzz::check_signal(signal));
    }
    let text = patchbay_fuzz::text(data);
    if let Ok(signal) = ui_frame_to_signal(&mut normalizer, text) {
        patchbay_fuzz::check_signal(&signal);
    }
    let _ = readable_line(text);
});
