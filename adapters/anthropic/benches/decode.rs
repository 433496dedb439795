//! Decoder throughput (MB/s of SSE bytes) on a large synthetic stream made of the recorded
//! captures (`tests/fixtures/anthropic/*.sse`) repeated, against plain
//! `serde_json::from_slice::<Value>` of the same `data:` payloads (the floor any decoder
//! pays). Every variant reports throughput over the same byte count (the whole SSE
//! stream), so the MB/s ratio is the time ratio.
//!
//! Run: `cargo bench -p patchbay-anthropic --bench decode`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use patchbay_anthropic::{AnthropicStreamDecoder, MessagesDecoder};
use patchbay_sse::Framing;
use patchbay_testkit::throughput::{
    SseStream, decode_each_payload, feed_in_reads, parse_payloads_as_json, repeated_sse_captures,
};

const CAPTURES: [&str; 2] = [
    "anthropic/py-basic_response.sse",
    "anthropic/py-tool_use_response.sse",
];

fn bench(c: &mut Criterion) {
    // About 4 MB of SSE: the captures back to back, repeated.
    let SseStream { bytes, payloads } = repeated_sse_captures(&CAPTURES, 4 << 20);
    let mut group = c.benchmark_group("anthropic");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.sample_size(20);
    group.bench_function("serde_json_value_of_payloads", |b| {
        b.iter(|| parse_payloads_as_json(&payloads))
    });
    group.bench_function("messages_decoder_of_payloads", |b| {
        b.iter(|| {
            let mut decoder = MessagesDecoder::new("bench");
            decode_each_payload(&payloads, |p, out| decoder.decode_data_at(p, 0, out));
        })
    });
    group.bench_function("sse_parser_alone", |b| {
        b.iter(|| {
            let mut parser = patchbay_sse::SseParser::new();
            let mut n = 0usize;
            for chunk in bytes.chunks(16 * 1024) {
                parser.feed_ref(chunk, |e| n += e.data.len());
            }
            black_box(n)
        })
    });
    group.bench_function("stream_decoder_of_sse_bytes", |b| {
        // As an LLM stream arrives: small reads (1 KiB).
        b.iter(|| {
            let decoder = AnthropicStreamDecoder::with_framing("bench", Framing::Sse);
            feed_in_reads(decoder, &bytes, 1024);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
