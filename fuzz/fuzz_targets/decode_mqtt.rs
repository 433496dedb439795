//! MQTT messages as a broker delivers them: the first byte picks the flags (envelope or
//! raw, retained, redelivered), the second the topic's length, the rest is the topic and
//! the payload. Every signal out (bad-input reports included) must be valid, a raw
//! message must publish back as exactly its bytes, and the same bytes framed as a broker's
//! packet stream (MQTT 3.1.1 and 5, with a small packet limit) must never panic.
#![no_main]

use bytes::BytesMut;
use patchbay_mqtt::codec::{Framer, Version};
use patchbay_mqtt::{Message, MessageDecoder, MessageEncoder, PayloadMode};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (flags, rest) = data.split_first().unwrap_or((&0, &[]));
    let (topic_len, rest) = rest.split_first().unwrap_or((&0, &[]));
    let split = usize::from(*topic_len).min(rest.len());
    let (topic, payload) = rest.split_at(split);
    let topic = patchbay_fuzz::text(topic);
    let mode = if flags & 1 == 0 {
        PayloadMode::Envelope
    } else {
        PayloadMode::Raw
    };
    let message = Message {
        topic,
        payload,
        retained: flags & 2 != 0,
        redelivered: flags & 4 != 0,
    };
    let mut decoder = MessageDecoder::new(patchbay_fuzz::SOURCE, mode);
    if let Some(decoded) = decoder.decode(&message) {
        patchbay_fuzz::check_decoded(std::slice::from_ref(&decoded));
        if mode == PayloadMode::Raw {
            let signal = decoded.into_signal();
            let bytes = MessageEncoder::new(PayloadMode::Raw, None)
                .encode(&signal)
                .expect("a raw message publishes");
            assert_eq!(bytes, payload, "a raw message goes out as it came");
        }
    }
    for version in [Version::V311, Version::V5] {
        let mut framer = Framer::new(version, 256);
        let mut buf = BytesMut::from(data);
        while let Ok(Some(_)) = framer.next(&mut buf) {}
    }
});
