//! jq expressions that recurse without end, never end or build huge values are stopped
//! by the evaluation's limits with a runtime error: no stack overflow (an abort), no
//! stall, no unbounded memory. Each runs on a thread with the 2 MiB stack of a runtime
//! worker, and the process counts allocations as the `patchbay` binary does.

use std::sync::mpsc;
use std::time::Duration;

use patchbay_filters::JqExpr;
use patchbay_filters::jq::MeteredAlloc;
use patchbay_signal::{Signal, object};

#[global_allocator]
static ALLOC: MeteredAlloc = MeteredAlloc(std::alloc::System);

/// The outputs of `code` on a small signal, evaluated on a 2 MiB thread; panics when
/// it takes longer than a generous guard (a stall).
fn outputs(code: &str) -> Vec<Result<serde_json::Value, String>> {
    let expr = JqExpr::compile(code).expect("compiles");
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let signal = Signal::new("x", "test", object! {"n" => 1});
            let outputs: Vec<Result<serde_json::Value, String>> = expr
                .outputs(&signal, 10)
                .into_iter()
                .map(|o| o.map_err(|e| e.to_string()))
                .collect();
            let _ = tx.send(outputs);
        })
        .expect("thread");
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("`{code}` did not end"))
}

fn stopped_by(code: &str, limit: &str) {
    let out = outputs(code);
    let last = out.last().unwrap_or_else(|| panic!("`{code}`: no output"));
    let error = last.as_ref().expect_err(code);
    assert!(error.contains(limit), "`{code}`: {error}");
}

#[test]
fn recursion_without_end_is_stopped_before_the_stack_overflows() {
    stopped_by("def f: f + 1; f", "recursed too deep");
    stopped_by("def f: [f]; f", "recursed too deep");
    stopped_by("def f: 1 + f; f", "recursed too deep");
}

#[test]
fn expressions_that_never_end_are_stopped() {
    stopped_by("def f: f; f", "steps");
    stopped_by("last(range(1e18))", "steps");
    stopped_by("[repeat(1)] | length", "");
    stopped_by("reduce range(1e18) as $x (0; . + 1)", "steps");
}

#[test]
fn huge_values_are_stopped() {
    stopped_by("[range(1e18)] | length", "");
    stopped_by(
        "reduce range(100) as $i (\"xx\"; . + .) | length",
        "allocated more than",
    );
    stopped_by(
        "reduce range(100) as $i ([1]; . + .) | length",
        "allocated more than",
    );
}

#[test]
fn ordinary_expressions_still_work() {
    let out = outputs("[range(1000)] | add");
    assert_eq!(out, vec![Ok(serde_json::json!(499500))]);
    let out = outputs("def f: if . < 100 then . + 1 | f else . end; 0 | f");
    assert_eq!(out, vec![Ok(serde_json::json!(100))]);
    let out = outputs("range(3)");
    assert_eq!(out.len(), 3);
    // A limit passed on one signal leaves nothing behind for the next.
    stopped_by("def f: f; f", "steps");
    assert_eq!(outputs(".payload.n"), vec![Ok(serde_json::json!(1))]);
}
