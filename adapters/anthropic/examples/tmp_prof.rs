fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/");
    let text = std::fs::read_to_string(format!("{root}anthropic/py-basic_response.sse")).unwrap();
    let payloads: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    let mut k = 0;
    let mut d = patchbay_anthropic::MessagesDecoder::new("x:y");
    let mut out = Vec::new();
    for _ in 0..300000 {
        out.clear();
        for p in &payloads {
            d.decode_data_at(p, 5, &mut out);
        }
        k += out.len();
    }
    println!("{k}");
}
