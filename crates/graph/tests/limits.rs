//! Absurd sizes and timeouts of the runtime and of an output's queue are refused at
//! validation, at their value, with the bounds.

use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, Options, Output, OutputContext, OutputKind, Registry,
    SourceText, WhenFull,
};

struct Sink;
impl Output for Sink {
    fn run(self: Box<Self>, _cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async { Ok(()) })
    }
}

fn compile(config: &str) -> Result<(), Vec<Diagnostic>> {
    let mut r = Registry::new();
    r.output(
        "sink",
        OutputKind {
            build: |_o: &Options<'_>| -> Result<Box<dyn Output>, Diagnostic> { Ok(Box::new(Sink)) },
            inbound: false,
            when_full: WhenFull::Block,
        },
    );
    patchbay_graph::compile(&[SourceText::new("p.toml", config)], &r).map(|_| ())
}

fn refused(config: &str, at: (usize, usize), message: &str) {
    let errors = compile(config).expect_err(config);
    let e = errors
        .iter()
        .find(|e| e.message.contains("queue") || e.message.contains("timeout"))
        .unwrap_or_else(|| panic!("{errors:?}"));
    assert_eq!((e.line, e.col), at, "{e}");
    assert!(e.message.contains(message), "{e}");
}

#[test]
fn absurd_runtime_options_are_refused() {
    refused(
        "[runtime]\nqueue = 18446744073709551615\n",
        (2, 9),
        "`queue` must be at least 1 and at most 1000000, got 18446744073709551615",
    );
    refused(
        "[runtime]\nqueue = 1000000000000\n",
        (2, 9),
        "`queue` must be at least 1 and at most 1000000",
    );
    refused(
        "[runtime]\nqueue = 0\n",
        (2, 9),
        "`queue` must be at least 1",
    );
    refused(
        "[runtime]\nshutdown_timeout_ms = 99999999999\n",
        (2, 23),
        "`shutdown_timeout_ms` must be at least 0 and at most 3600000",
    );
    compile("[runtime]\nqueue = 1000000\nshutdown_timeout_ms = 3600000\n")
        .expect("the maxima pass");
}

#[test]
fn an_absurd_output_queue_is_refused() {
    for queue in ["18446744073709551615", "1000000000000", "0", "-1"] {
        refused(
            &format!("[outputs.o]\ntype = \"sink\"\ninputs = []\nqueue = {queue}\n"),
            (4, 9),
            &format!("o: `queue` must be at least 1 and at most 1000000, got {queue}"),
        );
    }
}
