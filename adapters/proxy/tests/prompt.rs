//! Prompt mode (sajou's) in process: `prompt {text}` signals from a file source → the
//! `openai` and `anthropic` outputs (`mode = "prompt"`) → their `NAME.inbound` signals in a
//! file. The upstream is the replay server of `tests/support/llm/proxy_e2e.rs` (the model
//! names the capture).

use patchbay_testkit::llm_proxy_e2e as proxy_e2e;

use std::time::Duration;

use patchbay_graph::{Registry, RunningGraph, SourceText, compile};
use serde_json::Value;

fn prompt_line(text: &str, model: Option<&str>) -> String {
    let mut payload = serde_json::json!({"text": text});
    if let Some(model) = model {
        payload["model"] = model.into();
    }
    serde_json::json!({"type": "prompt", "source": "test", "payload": payload}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_start_streams_with_their_own_correlation() {
    let replay = proxy_e2e::start_replay().await;
    let dir = proxy_e2e::temp_dir("prompt");
    let prompts = dir.join("prompts.jsonl");
    let lines = [
        prompt_line("Say something", None),
        prompt_line(
            "Weather?",
            Some("openai-python-chat-stream-tool-call-single"),
        ),
        prompt_line("Unknown model", Some("no-such-model")),
        r#"{"type":"text_delta","source":"test","payload":{"agentId":"a","content":"x"}}"#
            .to_owned(),
    ];
    std::fs::write(&prompts, lines.join("\n") + "\n").expect("prompts");
    let anthropic_prompts = dir.join("anthropic.jsonl");
    std::fs::write(&anthropic_prompts, prompt_line("Hello", None) + "\n").expect("prompts");
    let out = dir.join("out.jsonl");
    let config = format!(
        r#"
[sources.prompts]
type = "file"
path = "{}"

[sources.aprompts]
type = "file"
path = "{}"

[outputs.gpt]
type = "openai"
mode = "prompt"
url = "{url}"
model = "openai-python-chat-stream-plain-text"
api_key = "sk-prompt-key"
inputs = ["prompts"]

[outputs.claude]
type = "anthropic"
mode = "prompt"
url = "{url}/v1"
model = "py-tool_use_response"
api_key = "sk-ant-prompt-key"
max_tokens = 64
inputs = ["aprompts"]

[outputs.out]
type = "file"
path = "{}"
inputs = ["gpt.inbound", "claude.inbound"]
"#,
        prompts.display(),
        anthropic_prompts.display(),
        out.display(),
        url = replay.url,
    );
    let mut registry = Registry::new();
    registry.adapter(&patchbay_ndjson::ADAPTER);
    registry.adapter(&patchbay_proxy::ADAPTER);
    let graph = compile(&[SourceText::new("prompt.toml", config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let graph = RunningGraph::spawn(graph);

    // Four requests: three OpenAI prompts and one Anthropic prompt, each ending in a
    // completion or an error.
    let deadline = tokio::time::Instant::now() + proxy_e2e::GUARD;
    let signals = loop {
        let signals = proxy_e2e::read_signals(&out);
        let ends = signals
            .iter()
            .filter(|s| s["type"] == "completion" || s["type"] == "error")
            .count();
        if ends >= 4 {
            break signals;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "prompts did not finish: {signals:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let report = tokio::time::timeout(proxy_e2e::GUARD, graph.stop())
        .await
        .expect("stops")
        .expect("runs");
    // The text_delta given to the openai output was refused (counted), not sent.
    let gpt = report.telemetry.component("gpt").expect("gpt stats");
    assert_eq!(gpt.bad_input, 1, "{gpt:?}");

    for s in &signals {
        let kind = s["type"].as_str().unwrap_or_default();
        if !kind.contains('.') && kind != "openai.chunk" {
            patchbay_testkit::assert_schema_valid(s);
        }
    }
    let dispatches: Vec<&Value> = signals
        .iter()
        .filter(|s| s["type"] == "task_dispatch")
        .collect();
    assert_eq!(dispatches.len(), 4, "{dispatches:?}");
    let of = |model: &str| -> (String, Vec<&Value>) {
        let d = dispatches
            .iter()
            .find(|d| d["payload"]["to"] == model)
            .unwrap_or_else(|| panic!("no dispatch to {model}"));
        let c = d["correlationId"].as_str().expect("correlation").to_owned();
        assert_eq!(d["payload"]["taskId"], c.as_str());
        assert_eq!(d["metadata"]["promptId"].as_str().map(str::len), Some(26));
        let of = signals
            .iter()
            .filter(|s| s["correlationId"] == c.as_str())
            .collect();
        (c, of)
    };
    let text = |of: &[&Value]| -> String {
        of.iter()
            .filter(|s| s["type"] == "text_delta")
            .filter_map(|s| s["payload"]["content"].as_str())
            .collect()
    };

    let (_, plain) = of("openai-python-chat-stream-plain-text");
    assert!(plain.iter().all(|s| s["source"] == "openai:gpt"));
    assert_eq!(
        text(&plain),
        "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend checking a reliable weather website or a weather app."
    );
    assert!(plain.iter().any(|s| s["type"] == "completion"));
    assert!(plain.iter().any(|s| s["type"] == "token_usage"));
    // The stream's own id is kept.
    assert!(plain.iter().filter(|s| s["type"] == "text_delta").all(|s| {
        s["metadata"]["streamId"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl-"))
    }));

    let (_, tool) = of("openai-python-chat-stream-tool-call-single");
    let call = tool
        .iter()
        .find(|s| s["type"] == "tool_call")
        .expect("tool_call");
    assert_eq!(call["payload"]["toolName"], "GetWeatherArgs");

    let (_, missing) = of("no-such-model");
    let error = missing
        .iter()
        .find(|s| s["type"] == "error")
        .expect("error");
    assert_eq!(error["metadata"]["status"], 404);

    let (_, claude) = of("py-tool_use_response");
    assert!(claude.iter().all(|s| s["source"] == "anthropic:claude"));
    assert_eq!(
        text(&claude),
        "I'll check the current weather in Paris for you."
    );
    let call = claude
        .iter()
        .find(|s| s["type"] == "tool_call")
        .expect("tool_call");
    assert_eq!(call["payload"]["toolName"], "get_weather");
    assert_eq!(call["payload"]["input"]["location"], "Paris");

    let keys = replay.seen.keys.lock().expect("keys").clone();
    assert!(
        keys.contains(&"Bearer sk-prompt-key".to_owned()),
        "{keys:?}"
    );
    assert!(keys.contains(&"sk-ant-prompt-key".to_owned()), "{keys:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
