use patchbay_signal::normalize::Decoded;
fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, f) = (&args[0], &args[1]);
    let text = std::fs::read_to_string(if f.starts_with('/') { f.clone() } else { format!("{root}{f}") }).unwrap();
    let payloads: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ").or(l.starts_with('{').then_some(l))).filter(|l| *l != "[DONE]").collect();
    let n = if mode == "time" { 300 } else { 2000 };
    if mode == "time" {
        let run = |which: &str| { let t = std::time::Instant::now(); let mut k = 0usize;
            if which == "serde" { for _ in 0..n { for p in &payloads { let v: serde_json::Value = serde_json::from_str(p).unwrap(); k += v.as_object().unwrap().len(); } } }
            else { for _ in 0..n { let mut d: Box<dyn patchbay_signal::decode::StreamDecoder> = if f.contains("openai") { patchbay_openai::parse_decoder("b:x") } else { patchbay_anthropic::parse_decoder("b:x") };
                let mut out: Vec<Decoded> = Vec::new(); d.feed(text.as_bytes(), &mut out); d.finish(&mut out); k += out.len(); } }
            std::hint::black_box(k); t.elapsed() };
        let (mut s, mut d) = (std::time::Duration::MAX, std::time::Duration::MAX);
        for _ in 0..15 { s = s.min(run("serde")); d = d.min(run("decoder")); }
        println!("{f}: wall ratio {:.2}", s.as_secs_f64() / d.as_secs_f64());
        return;
    }
    let mut k = 0usize;
    match mode.as_str() {
        "none" => {}
        "serde" => for _ in 0..n { for p in &payloads { let v: serde_json::Value = serde_json::from_str(p).unwrap(); k += v.as_object().unwrap().len(); } },
        _ => for _ in 0..n {
            let mut d: Box<dyn patchbay_signal::decode::StreamDecoder> = if f.contains("openai") { patchbay_openai::parse_decoder("b:x") } else { patchbay_anthropic::parse_decoder("b:x") };
            let mut out: Vec<Decoded> = Vec::new();
            d.feed(text.as_bytes(), &mut out); d.finish(&mut out); k += out.len(); },
    }
    std::hint::black_box(k);
}
