//! OpenTelemetry OTLP protobuf bodies, of each kind: a typed error or a model, never a
//! panic; what a model decodes to is schema-valid.
#![no_main]

use patchbay_otlp::{Limits, OtlpDecoder, SignalKind, protobuf};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for kind in [SignalKind::Logs, SignalKind::Traces, SignalKind::Metrics] {
        if let Ok(model) = protobuf::decode(kind, data, &Limits::default()) {
            let mut decoder = OtlpDecoder::new(patchbay_fuzz::SOURCE);
            let mut out = Vec::new();
            decoder.decode(&model, &mut out);
            decoder.flush(&mut out);
            patchbay_fuzz::check_decoded(&out);
        }
    }
});
