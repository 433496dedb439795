//! Config checks of the `openai`/`anthropic` components (no I/O: `compile` only).

use patchbay_graph::{Registry, SourceText, compile};

fn errors(config: &str) -> String {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_ndjson::ADAPTER);
    registry.adapter(&patchbay_proxy::ADAPTER);
    match compile(&[SourceText::new("llm.toml", config)], &registry) {
        Ok(_) => String::new(),
        Err(diagnostics) => format!("{diagnostics:?}"),
    }
}

const OUT: &str = "\n[outputs.out]\ntype = \"stdout\"\ninputs = [\"llm\"]\n";

#[test]
fn a_proxy_listens_on_loopback_only() {
    let ok = format!(
        "[sources.llm]\ntype = \"openai\"\nmode = \"proxy\"\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:11434\"\n{OUT}"
    );
    assert_eq!(errors(&ok), "");
    let open = ok.replace("127.0.0.1:8080", "0.0.0.0:8080");
    assert!(
        errors(&open).contains("not a loopback address"),
        "{}",
        errors(&open)
    );
    let https = ok
        .replace("http://127.0.0.1:11434", "https://api.anthropic.com")
        .replace("openai", "anthropic");
    assert_eq!(errors(&https), "");
    let no_upstream = ok.replace("upstream = \"http://127.0.0.1:11434\"\n", "");
    assert!(
        errors(&no_upstream).contains("upstream"),
        "{}",
        errors(&no_upstream)
    );
    let typo = ok.replace("upstream =", "upstreams =");
    assert!(!errors(&typo).is_empty());
}

#[test]
fn prompt_mode_is_an_output_and_proxy_mode_a_source() {
    let prompt_source = "[sources.llm]\ntype = \"openai\"\nmode = \"prompt\"\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n"
        .to_owned()
        + OUT;
    assert!(
        errors(&prompt_source).contains("[outputs]"),
        "{}",
        errors(&prompt_source)
    );
    let prompt_output = r#"
[sources.in]
type = "stdin"
[outputs.llm]
type = "anthropic"
mode = "prompt"
url = "https://api.anthropic.com"
model = "claude-sonnet-4-5"
api_key = "k"
inputs = ["in"]
[outputs.out]
type = "stdout"
inputs = ["llm.inbound"]
"#;
    assert_eq!(errors(prompt_output), "");
    let no_model = prompt_output.replace("model = \"claude-sonnet-4-5\"\n", "");
    assert!(errors(&no_model).contains("model"), "{}", errors(&no_model));
    let proxy_output = prompt_output.replace("mode = \"prompt\"", "mode = \"proxy\"");
    assert!(
        errors(&proxy_output).contains("prompt"),
        "{}",
        errors(&proxy_output)
    );
}

#[test]
fn listener_options_are_range_checked_and_proxy_only() {
    let proxy = "[sources.llm]\ntype = \"openai\"\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:11434\"\n";
    for (option, says) in [
        ("max_connections = 0", "max_connections"),
        ("header_timeout_ms = 0", "header_timeout_ms"),
        ("idle_timeout_ms = 100000000000", "idle_timeout_ms"),
        ("allowed_hosts = [\"http://x\"]", "not a host name"),
    ] {
        let e = errors(&format!("{proxy}{option}\n{OUT}"));
        assert!(e.contains(says) && e.contains("line: 5"), "{option}: {e}");
    }
    let prompt = "[outputs.llm]\ntype = \"openai\"\nmode = \"prompt\"\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\nmax_connections = 4\n";
    let e = errors(prompt);
    assert!(
        e.contains("`max_connections` is a proxy-mode option"),
        "{e}"
    );
}
