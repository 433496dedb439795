//! What the LLM tap proxy reads: request bodies (summary, error bodies), response SSE data
//! payloads and whole response bodies, for both APIs; and `/v1/models` bodies.
#![no_main]

use patchbay_proxy::{Api, RequestSummary, error_body};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = RequestSummary::read(data);
    let _ = error_body(data);
    let _ = patchbay_openai::model_ids(data);
    let text = patchbay_fuzz::text(data);
    for api in [Api::OpenAi, Api::Anthropic] {
        // As a stream: each line an SSE `data` payload (the `data: ` prefix optional).
        let mut out = Vec::new();
        let mut decoder = api.decoder(patchbay_fuzz::SOURCE);
        for (t, line) in text.lines().enumerate() {
            let payload = line.strip_prefix("data:").map_or(line, str::trim_start);
            decoder.decode_data_at(payload, t as i64, &mut out);
        }
        decoder.end_stream_at(i64::MAX, &mut out);
        patchbay_fuzz::check_decoded(&out);
        // As a whole response body.
        out.clear();
        let mut decoder = api.decoder(patchbay_fuzz::SOURCE);
        decoder.decode_response_at(text, 1, &mut out);
        decoder.end_stream_at(2, &mut out);
        patchbay_fuzz::check_decoded(&out);
    }
});
