//! The proxy's health poll (`/v1/models` of the upstream) against the replay upstream of
//! `tests/support/llm/proxy_e2e.rs` and against nothing.

use patchbay_testkit::llm_proxy_e2e as proxy_e2e;

use std::time::Duration;

use patchbay_proxy::{Api, http_client, poll_models};

#[tokio::test]
async fn models_are_counted_and_failures_explained() {
    let replay = proxy_e2e::start_replay().await;
    let client = http_client().expect("client");
    let timeout = Duration::from_secs(5);
    let n = poll_models(&client, Api::OpenAi, &replay.url, Some("k"), timeout).await;
    assert_eq!(n, Ok(2));
    let port = proxy_e2e::free_port();
    let down = format!("http://127.0.0.1:{port}");
    let err = poll_models(&client, Api::Anthropic, &down, None, timeout)
        .await
        .expect_err("nothing listens");
    assert!(err.contains(&down), "{err}");
    assert!(!err.contains("sk-"), "{err}");
}

#[tokio::test]
async fn https_clients_build_with_the_ring_provider() {
    // Building twice must not fail on the provider being installed already.
    http_client().expect("client");
    http_client().expect("client again");
}
