//! Finding a local OpenClaw gateway: a TCP connect to its port, and whether its config
//! file holds a token (the token itself is never read into the result).

use patchbay_graph::probe::{Offers, ProbeContext, Service, ServiceState};
use patchbay_graph::{BoxFuture, descriptor::Probe};

use crate::config_file::{default_config_file, display_path, read_token};

/// The gateway's well-known local address.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:18789";

/// The probe of `local:openclaw`.
pub const PROBE: Probe = Probe::new("openclaw", run_probe);

fn run_probe(cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move {
        let address = cx.address_or(DEFAULT_ADDRESS).to_owned();
        Some(probe(&address, default_config_file().as_deref(), &cx).await)
    })
}

/// Probes a gateway at `address`; `config` is the OpenClaw config file to look for a token
/// in (`None`: do not look).
pub async fn probe(address: &str, config: Option<&std::path::Path>, cx: &ProbeContext) -> Service {
    let service = |state| Service::new(PROBE.service, Offers::Endpoint, address, state);
    let connect = tokio::time::timeout(cx.timeout, tokio::net::TcpStream::connect(address)).await;
    let mut found = match connect {
        Ok(Ok(_stream)) => service(ServiceState::Available),
        Ok(Err(err)) => {
            let reason = if err.kind() == std::io::ErrorKind::ConnectionRefused {
                "connection refused".to_owned()
            } else {
                err.to_string()
            };
            service(ServiceState::Unavailable).with_detail(reason)
        }
        Err(_) => service(ServiceState::Unavailable)
            .with_detail(format!("no answer within {} ms", cx.timeout.as_millis())),
    };
    if let Some(path) = config {
        let (has_token, remark) = match read_token(path) {
            Ok(_) => (true, format!("token found in {}", display_path(path))),
            Err(why) => (false, why.to_string()),
        };
        found.token_found = Some(has_token);
        found.detail = Some(match found.detail.take() {
            Some(reason) => format!("{reason}; {remark}"),
            None => remark,
        });
    }
    found
}
