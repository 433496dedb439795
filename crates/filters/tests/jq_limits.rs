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

#[test]
fn values_nested_too_deep_are_refused_before_they_overflow_the_stack() {
    // Each of these used to build a value a million levels deep, whose drop recursed past
    // the end of the 2 MiB stack and aborted the process.
    let deep = "nested deeper than 512 levels";
    stopped_by("reduce range(1e6) as $i (0; [.])", deep);
    stopped_by("reduce range(1e6) as $i (0; {a: .})", deep);
    stopped_by("reduce range(1e6) as $i ({}; .a = .)", deep);
    stopped_by("reduce range(1e6) as $i ({}; .a |= [.])", deep);
    stopped_by("reduce range(1e6) as $i ([0]; group_by(.))", deep);
    stopped_by("reduce range(1e6) as $i (0; first(path_value(.)))", deep);
    stopped_by("last(limit(1e6; recurse([.])))", deep);
    stopped_by("reduce range(1e6) as $i (0; [.]) | length", deep);
    stopped_by("\"[\" * 100000 | fromjson", deep);
}

#[test]
fn huge_single_allocations_are_refused_before_they_are_made() {
    // One repeat of a terabyte aborted the process (the allocation failed); a gigabyte was
    // allocated and written before any step could stop it.
    let memory = "allocated more than 64 MiB";
    stopped_by("\"x\" * 1000000000000", memory);
    stopped_by("1000000000000 * \"x\"", memory);
    stopped_by("\"x\" * 1000000000 | length", memory);
    stopped_by("\"xy\" * 100000000000000000000000", memory);
    stopped_by(".s = \"x\" | .s *= 1000000000000", memory);
    stopped_by("\"x\" * 60000000 | explode | length", memory);
    // Squaring big integers: each product takes longer than any step.
    stopped_by("reduce range(40) as $i (3; . * .)", "integer larger than");
    stopped_by("\"1\" * 100000 | tonumber", "integer larger than");
}

#[test]
fn the_guards_keep_what_jq_computes() {
    let one = |code: &str| {
        let out = outputs(code);
        assert_eq!(out.len(), 1, "`{code}`: {out:?}");
        out.into_iter().next().unwrap().unwrap()
    };
    use serde_json::json;
    assert_eq!(one("\"ab\" * 3"), json!("ababab"));
    assert_eq!(one("\"ab\" * 0"), json!(null));
    assert_eq!(one("[(1,2) * (3,4)]"), json!([3, 4, 6, 8]));
    assert_eq!(
        one("{a: {b: 1}} * {a: {c: 2}}"),
        json!({"a": {"b": 1, "c": 2}})
    );
    assert_eq!(one("{a: 3} | .a *= 2 | .a"), json!(6));
    assert_eq!(one("[3, 1, 3] | group_by(.)"), json!([[1], [3, 3]]));
    assert_eq!(
        one("\"[1, {\\\"a\\\": [2]}]\" | fromjson"),
        json!([1, {"a": [2]}])
    );
    assert_eq!(one("\"hé\" | explode"), json!([104, 233]));
    assert_eq!(
        one("[paths]"),
        json!([
            ["id"],
            ["type"],
            ["timestamp"],
            ["source"],
            ["payload"],
            ["payload", "n"]
        ])
    );
    assert_eq!(
        one("reduce range(100) as $i (0; [.]) | [paths] | length"),
        json!(100)
    );
    assert_eq!(
        one("100000000000 * 100000000000 | tostring | length"),
        json!(23)
    );
    // A large value checked again and again costs steps, not unbounded time.
    let out = outputs("[range(100000)] as $big | reduce range(100000) as $i (0; [$big, .] | .[1])");
    assert!(
        out.last().unwrap().is_ok() || out.last().unwrap().as_ref().unwrap_err().contains("steps"),
        "{out:?}"
    );
}

#[test]
fn reserved_names_are_refused() {
    for code in [
        "_patchbay_depth",
        "def _patchbay_x: 1; 2",
        ". as $__patchbay_l | 1",
    ] {
        let err = JqExpr::compile(code).unwrap_err().to_string();
        assert!(err.contains("reserved"), "`{code}`: {err}");
    }
    assert!(JqExpr::compile("module {}; 1").is_err());
}
