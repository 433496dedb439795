//! `midi` source and output options as `patchbay validate` sees them: built without I/O,
//! every mistake reported at its key.

use patchbay_graph::{Registry, SourceText};

/// Compiles a config with only the MIDI components registered; the error messages.
fn errors(config: &str) -> Vec<String> {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_midi::ADAPTER);
    match patchbay_graph::compile(&[SourceText::new("midi.toml", config)], &registry) {
        Ok(_) => Vec::new(),
        Err(diagnostics) => diagnostics.iter().map(|d| d.to_string()).collect(),
    }
}

fn source(options: &str) -> String {
    format!(
        "[sources.pads]\ntype = \"midi\"\n{options}\n\n[outputs.leds]\ntype = \"midi\"\n\
         virtual = \"leds\"\ninputs = [\"pads\"]\n"
    )
}

fn output(options: &str) -> String {
    format!(
        "[sources.pads]\ntype = \"midi\"\nport = \"pad\"\n\n[outputs.leds]\ntype = \"midi\"\n\
         inputs = [\"pads\"]\n{options}\n"
    )
}

fn assert_one_error(config: &str, line: usize, expected: &str) {
    let errors = errors(config);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let first = &errors[0];
    assert!(first.contains(&format!("midi.toml:{line}:")), "{first}");
    assert!(first.contains(expected), "{first}");
}

#[test]
fn good_configs_build_without_touching_midi() {
    assert_eq!(
        errors(&source(
            "port = \"nanoPAD2.*\"\nchannel = 10\nsystem = true\nrescan_ms = 250\nclient_name = \"pb\""
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(&output("port = \"nanoPAD2.*\"\nrescan_ms = 100")),
        Vec::<String>::new()
    );
}

#[test]
fn source_mistakes_point_at_their_key() {
    assert_one_error(
        &source("port = \"pad\"\nchannel = 17"),
        4,
        "channel 17 is out of range",
    );
    assert_one_error(
        &source("port = \"pad[\""),
        3,
        "port pattern `pad[` is not a valid regex",
    );
    assert_one_error(
        &source("port = \"pad\"\nrescan_ms = 5"),
        4,
        "`rescan_ms` must be at least 10 and at most 86400000, got 5",
    );
    assert_one_error(
        &source("port = \"pad\"\nclient_name = \"a:b\""),
        4,
        "invalid MIDI client name `a:b`",
    );
    assert_one_error(
        &source("port = \"pad\"\nchanel = 3"),
        4,
        "did you mean `channel`",
    );
    assert_one_error(&source("channel = 3"), 1, "missing field `port`");
}

#[test]
fn output_mistakes_point_at_their_key() {
    assert_one_error(
        &output("port = \"a\"\nvirtual = \"b\""),
        9,
        "set either `port` or `virtual`, not both",
    );
    assert_one_error(&output(""), 5, "set `port`");
    assert_one_error(&output("virtual = \"a:b\""), 8, "without `:`");
    assert_one_error(&output("port = \"(\""), 8, "is not a valid regex");
}
