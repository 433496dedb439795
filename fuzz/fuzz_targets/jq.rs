//! jq expressions as `when`/`map` run them: an arbitrary program (the first line) on a
//! signal whose payload is the rest (JSON), within the evaluation's step, stack, memory
//! and depth limits, on a thread with the 2 MiB stack of a runtime worker. The process
//! counts allocations as the `patchbay` binary does, so the memory limit holds.
#![no_main]

use patchbay_filters::JqExpr;
use patchbay_filters::jq::MeteredAlloc;
use patchbay_signal::{Object, Signal};

#[global_allocator]
static ALLOC: MeteredAlloc = MeteredAlloc(std::alloc::System);

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = patchbay_fuzz::text(data);
    let (program, input) = text.split_once('\n').unwrap_or((text, ""));
    let Ok(expr) = JqExpr::compile(program) else {
        return;
    };
    let payload = match serde_json::from_str::<serde_json::Value>(input) {
        Ok(serde_json::Value::Object(object)) => object,
        Ok(other) => Object::from_iter([("value".to_owned(), other)]),
        Err(_) => Object::new(),
    };
    let signal = Signal::new("fuzz", patchbay_fuzz::SOURCE, payload);
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let _ = expr.is_truthy(&signal);
            let _ = expr.outputs(&signal, 16);
        })
        .expect("thread")
        .join()
        .expect("the evaluation does not panic");
});
