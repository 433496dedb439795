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
