//! OSC packets as a UDP socket delivers them (whole datagrams: messages, bundles nested,
//! every type tag): a typed refusal or signals, never a panic; every signal, the `error`
//! signal of a refused packet included, is schema-valid; what is taken is written back by
//! the encoder and reads the same.
#![no_main]

use patchbay_osc::{OscDecoder, encode_packet, parse_packet};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut decoder = OscDecoder::new(patchbay_fuzz::SOURCE, 65_535);
    let mut out = Vec::new();
    let peer = "127.0.0.1:9000".parse().ok();
    let _ = decoder.decode(data, peer, 0, &mut out);
    patchbay_fuzz::check_decoded(&out);
    if let Ok(packet) = parse_packet(data) {
        let mut bytes = Vec::new();
        // A decoded packet can always be written again (its strings hold no NUL), and
        // the bytes read back to the same packet (NaN floats aside: compared by bits).
        encode_packet(&packet, &mut bytes).expect("a decoded packet encodes");
        let again = parse_packet(&bytes).expect("an encoded packet decodes");
        assert_eq!(format!("{packet:?}"), format!("{again:?}"));
    }
});
