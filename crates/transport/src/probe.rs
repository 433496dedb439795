//! What the adapters' discovery probes share: finding a program on `PATH`, making a report
//! that reads files off the runtime's threads, and the one HTTP client probes ask with.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchbay_graph::probe::{Offers, Service, ServiceState};

/// The program `name` found on `path` (a `PATH` value): the first executable file of
/// that name in its directories (empty entries skipped).
pub fn find_program(path: Option<&OsStr>, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file that may be run.
pub fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// Where a program probe says the program is, and its state: the binary found (available)
/// or its bare `name` (unavailable).
pub fn program_state(binary: Option<&Path>, name: &str) -> (String, ServiceState) {
    match binary {
        Some(b) => (b.display().to_string(), ServiceState::Available),
        None => (name.to_owned(), ServiceState::Unavailable),
    }
}

/// Runs `report` (which reads files) on the blocking pool; should that task fail, the
/// service `service` at `address` is reported in error, with why.
pub async fn report_blocking(
    service: &'static str,
    address: &'static str,
    report: impl FnOnce() -> Service + Send + 'static,
) -> Service {
    tokio::task::spawn_blocking(report)
        .await
        .unwrap_or_else(|e| {
            Service::new(service, Offers::Endpoint, address, ServiceState::Error)
                .with_detail(e.to_string())
        })
}

/// The probes' HTTP client, built once: no proxies (probes ask loopback addresses), no
/// redirects, no connection pool (a pooled connection could outlive the service it was
/// made to).
pub fn probe_client() -> Result<&'static reqwest::Client, &'static String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            crate::client_builder()
                .no_proxy()
                .pool_max_idle_per_host(0)
                .redirect(reqwest::redirect::Policy::none())
                .user_agent("patchbay-discovery")
                .build()
                .map_err(|e| format!("cannot build an HTTP client: {e}"))
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_only_where_it_may_run() {
        let dir = std::env::temp_dir().join(format!("patchbay-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let program = dir.join("tool");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let path = std::env::join_paths(["", dir.to_str().unwrap()]).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(find_program(Some(&path), "tool"), None, "not executable");
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(find_program(Some(&path), "tool"), Some(program.clone()));
        assert_eq!(find_program(Some(&path), "other"), None);
        assert_eq!(find_program(None, "tool"), None);
        let (address, state) = program_state(Some(&program), "tool");
        assert_eq!(
            (address.as_str(), state),
            (program.to_str().unwrap(), ServiceState::Available)
        );
        assert_eq!(
            program_state(None, "tool"),
            ("tool".to_owned(), ServiceState::Unavailable)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_failed_report_is_an_error_of_the_service() {
        let service = report_blocking("x", "addr", || panic!("the report failed")).await;
        assert_eq!(service.state, ServiceState::Error);
        assert_eq!(service.address, "addr");
        let fine = report_blocking("x", "addr", || {
            Service::new("x", Offers::Endpoint, "found", ServiceState::Available)
        })
        .await;
        assert_eq!(fine.address, "found");
    }
}
