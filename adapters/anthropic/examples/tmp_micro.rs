use std::time::Instant;
fn main() {
    let n = 1_000_000;
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..n {
        k += patchbay_signal::next_id().len();
    }
    println!("next_id {:?}/op {k}", t.elapsed() / n);
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..n {
        k += patchbay_signal::now_ms();
    }
    println!("now_ms {:?}/op {k}", t.elapsed() / n);
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..n {
        let mut o = patchbay_signal::Object::new();
        o.insert("block".into(), 1.into());
        k += o.len();
    }
    println!("obj1 {:?}/op {k}", t.elapsed() / n);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/");
    let text = std::fs::read_to_string(format!("{root}anthropic/py-basic_response.sse")).unwrap();
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..100000 {
        let mut p = patchbay_sse::SseParser::new();
        k += p.feed(text.as_bytes()).len();
        k += p.finish().len();
    }
    println!("sse {:?}/stream {k}", t.elapsed() / 100000);
    let payloads: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..100000 {
        for p in &payloads {
            let v: serde_json::Value = serde_json::from_str(p).unwrap();
            k += v.as_object().unwrap().len();
        }
    }
    println!("parse {:?}/stream {k}", t.elapsed() / 100000);
    let t = Instant::now();
    let mut k = 0;
    let mut d = patchbay_anthropic::MessagesDecoder::new("x:y");
    let mut out = Vec::new();
    for _ in 0..100000 {
        out.clear();
        for p in &payloads {
            d.decode_data_at(p, 5, &mut out);
        }
        k += out.len();
    }
    println!("decode {:?}/stream {k}", t.elapsed() / 100000);
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..100000 {
        let mut p = patchbay_sse::DataFramer::detect();
        p.feed(text.as_bytes(), |f| k += f.data.len());
        p.finish(|f| k += f.data.len());
    }
    println!("framer {:?}/stream {k}", t.elapsed() / 100000);
}
#[allow(dead_code)]
fn unused() {}
