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
use patchbay_signal::decode::StreamDecoder;
use patchbay_sse::Framing;
use serde_json::Value;

const CAPTURES: [&str; 2] = [
    "anthropic/py-basic_response.sse",
    "anthropic/py-tool_use_response.sse",
];

/// About 4 MB of SSE: the captures back to back, repeated.
fn stream() -> (Vec<u8>, Vec<Vec<u8>>) {
    let one: String = CAPTURES
        .iter()
        .map(|c| {
            let mut text = patchbay_testkit::fixture_text(c);
            if !text.ends_with("\n\n") {
                text.push_str("\n\n");
            }
            text
        })
        .collect();
    let repeat = (4 << 20) / one.len().max(1) + 1;
    let text = one.repeat(repeat);
    let payloads = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| d.as_bytes().to_vec())
        .collect();
    (text.into_bytes(), payloads)
}

fn bench(c: &mut Criterion) {
    let (bytes, payloads) = stream();
    let mut group = c.benchmark_group("anthropic");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.sample_size(20);
    group.bench_function("serde_json_value_of_payloads", |b| {
        b.iter(|| {
            for p in &payloads {
                black_box(serde_json::from_slice::<Value>(p).ok());
            }
        })
    });
    group.bench_function("messages_decoder_of_payloads", |b| {
        b.iter(|| {
            let mut decoder = MessagesDecoder::new("bench");
            let mut out = Vec::with_capacity(64);
            for p in &payloads {
                decoder.decode_data_at(std::str::from_utf8(p).unwrap_or_default(), 0, &mut out);
                black_box(&out);
                out.clear();
            }
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
        b.iter(|| {
            let mut decoder = AnthropicStreamDecoder::with_framing("bench", Framing::Sse);
            let mut out = Vec::with_capacity(64);
            // As an LLM stream arrives: small reads (1 KiB), each read's signals handed on
            // before the next (as the proxy's tap does).
            for chunk in bytes.chunks(1024) {
                decoder.feed(chunk, &mut out);
                black_box(&out);
                out.clear();
            }
            decoder.finish(&mut out);
            black_box(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
