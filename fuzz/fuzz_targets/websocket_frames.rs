//! The sidecar's WebSocket frame reader (`patchbay_server::websocket::Reader`): any bytes,
//! split anywhere, give messages within the limit, a violation, or a wait for more; never
//! a panic, and never a buffer beyond the limit and one read. A message read as text is
//! its bytes when they are UTF-8 and an error when not (ASCII found while unmasking is
//! taken without a second check).
#![no_main]

use patchbay_server::websocket::{Incoming, Reader};

/// The limit the fuzzed reader takes (small, so that the too-long paths are reached).
const MAX: usize = 4096;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let mut reader = Reader::new(MAX);
    for piece in bytes.chunks(usize::from(split).max(1)) {
        reader.push(piece);
        loop {
            match reader.decode_next() {
                Ok(Some(Incoming::Message(_, payload))) => {
                    let bytes = reader.bytes(&payload);
                    assert!(bytes.len() <= MAX);
                    assert_eq!(reader.text(&payload).ok(), std::str::from_utf8(bytes).ok());
                }
                Ok(Some(Incoming::Ping(data))) => assert!(data.len() <= 125),
                Ok(Some(Incoming::Close(_))) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
