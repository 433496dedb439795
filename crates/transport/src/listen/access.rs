//! Who may talk to a listener: the `Host` a request names (DNS rebinding) and the
//! `Origin` a browser sends (a page on another site).

use std::net::SocketAddr;

use axum::http::{HeaderMap, HeaderValue, header};

/// The host names a loopback listener always accepts (with any port).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Which browser origins a listener accepts. A request without `Origin` (every
/// non-browser client) is never refused for it, except by [`Origins::None`]'s rule below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    /// http(s) origins on `localhost`, `127.0.0.1` and `[::1]` (any port).
    Local,
    /// These entries: exact origins (`https://app.example`), origins ending in `:*` (any
    /// port), or `*` (any origin).
    List(Vec<String>),
    /// No browser at all: any request that carries an `Origin` is refused (an endpoint only
    /// programs post to, such as Claude Code's hooks).
    None,
}

impl Origins {
    /// Whether a request with this `Origin` header (or none) may come in.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else {
            // Non-browser clients send no Origin; browsers always do on cross-site requests.
            return true;
        };
        let origin = origin.trim();
        match self {
            Origins::None => false,
            Origins::Local => parse_origin(origin)
                .is_some_and(|(_, host, _)| LOOPBACK_HOSTS.contains(&host.as_str())),
            Origins::List(list) => {
                let Some((scheme, host, port)) = parse_origin(origin) else {
                    return list.iter().any(|o| o == "*");
                };
                list.iter().any(|allowed| {
                    if allowed == "*" {
                        return true;
                    }
                    let (pattern, any_port) = match allowed.strip_suffix(":*") {
                        Some(p) => (p, true),
                        None => (allowed.as_str(), false),
                    };
                    parse_origin(pattern).is_some_and(|(s, h, p)| {
                        s == scheme && h == host && (any_port || p == port)
                    })
                })
            }
        }
    }

    /// Checks the entries of an `allowed_origins` list: the index and text of the first
    /// one that is not an origin.
    pub fn check_list(list: &[String]) -> Result<(), (usize, String)> {
        for (i, o) in list.iter().enumerate() {
            if o != "*" && parse_origin(o.strip_suffix(":*").unwrap_or(o)).is_none() {
                return Err((
                    i,
                    format!(
                        "`{o}` is not an origin (`http://host[:port]`, `https://host:*` or `*`)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Checks the entries of an `allowed_hosts` list: the index and text of the first one
/// that is not a host name (`app.example`, `192.168.1.5`, `[fd00::1]`, or `*`).
pub fn check_hosts(list: &[String]) -> Result<(), (usize, String)> {
    for (i, h) in list.iter().enumerate() {
        let h = h.trim();
        let bad = h.is_empty()
            || h.contains("://")
            || h.contains(['/', '?', '#', '@', ' ', ','])
            || (h != "*" && h.contains('*'));
        if bad {
            return Err((
                i,
                format!("`{h}` is not a host name (e.g. `app.example`, `192.168.1.5`, or `*`)"),
            ));
        }
    }
    Ok(())
}

/// Why a request was refused at the door: the reason it is counted under
/// (`patchbay_http_refused_total{reason=…}`) and what the client is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// `forbidden_host` or `forbidden_origin`.
    pub reason: &'static str,
    /// The answer's text.
    pub message: &'static str,
}

/// A listener's access rules: which `Host` names and which `Origin`s it accepts.
#[derive(Debug, Clone)]
pub struct Access {
    /// `None`: any host, else loopback names plus these (`*`: any).
    hosts: Option<Vec<String>>,
    origins: Origins,
}

impl Access {
    /// The rules of a listener bound to `listen`: a loopback listener accepts only
    /// loopback host names (`localhost`, `127.0.0.1`, `[::1]`, any port) plus
    /// `allowed_hosts`; another accepts any host unless `allowed_hosts` is given (then
    /// those, and the loopback names). Origins per `origins`.
    pub fn new(listen: SocketAddr, allowed_hosts: Option<Vec<String>>, origins: Origins) -> Access {
        let hosts = match allowed_hosts {
            Some(list) => Some(
                list.into_iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
            ),
            None if listen.ip().is_loopback() => Some(Vec::new()),
            None => None,
        };
        Access { hosts, origins }
    }

    /// The origin rules.
    pub fn origins(&self) -> &Origins {
        &self.origins
    }

    /// Whether a request naming this `Host` (or none: an HTTP/1.0 program, never a
    /// browser) may come in.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        let Some(list) = &self.hosts else {
            return true;
        };
        let Some(host) = host else {
            return true;
        };
        let Some(name) = host_name(host) else {
            return false;
        };
        LOOPBACK_HOSTS.contains(&name.as_str()) || list.iter().any(|h| h == "*" || *h == name)
    }

    /// Whether a request with this `Origin` (or none) may come in, given its `Host`: a
    /// page the listener served itself (same origin) always may, unless no browser may.
    pub fn origin_allowed(&self, origin: Option<&str>, host: Option<&str>) -> bool {
        if self.origins.allows(origin) {
            return true;
        }
        match (origin, host, &self.origins) {
            (_, _, Origins::None) => false,
            (Some(origin), Some(host), _) => {
                let origin = origin.trim().to_ascii_lowercase();
                origin.strip_prefix("http://") == Some(host.trim().to_ascii_lowercase().as_str())
            }
            _ => false,
        }
    }

    /// Checks a request's headers: `Host` first, then `Origin`.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refused> {
        self.check_with_authority(headers, None)
    }

    /// [`Access::check`] for an HTTP/2 request, whose host is its `:authority` (a `Host`
    /// header is optional there): both are checked when both are given.
    pub fn check_with_authority(
        &self,
        headers: &HeaderMap,
        authority: Option<&str>,
    ) -> Result<(), Refused> {
        let text = |name| match headers.get(name).map(HeaderValue::to_str) {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v)),
            Some(Err(_)) => Err(()),
        };
        let host = text(header::HOST).map_err(|()| FORBIDDEN_HOST)?;
        if !self.host_allowed(host) || !self.host_allowed(authority) {
            return Err(FORBIDDEN_HOST);
        }
        let host = host.or(authority);
        let origin = text(header::ORIGIN).map_err(|()| FORBIDDEN_ORIGIN)?;
        if !self.origin_allowed(origin, host) {
            return Err(FORBIDDEN_ORIGIN);
        }
        Ok(())
    }
}

const FORBIDDEN_HOST: Refused = Refused {
    reason: "forbidden_host",
    message: "host not allowed (add it to `allowed_hosts` to serve it)",
};

const FORBIDDEN_ORIGIN: Refused = Refused {
    reason: "forbidden_origin",
    message: "origin not allowed",
};

/// The lowercase host name of a `Host` header, without its port (`[::1]` keeps its
/// brackets). `None` when it is not `name[:port]`.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim().to_ascii_lowercase();
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let (name, tail) = host.split_at(end + 1);
        match tail {
            "" => (name, None),
            t => (name, Some(t.strip_prefix(':')?)),
        }
    } else {
        match host.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (host.as_str(), None),
        }
    };
    if name.is_empty() || port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return None;
    }
    Some(name.to_owned())
}

/// Splits an origin `scheme://host[:port]` into lowercase scheme, host and port (the
/// scheme's default when absent). `None` when it is not an http(s) origin.
fn parse_origin(origin: &str) -> Option<(String, String, u16)> {
    let lower = origin.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://")?;
    let default_port = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    // An IPv6 host is bracketed; its colons are not the port separator.
    let (host, port) = if let Some(end) = rest.find(']') {
        let (host, tail) = rest.split_at(end + 1);
        match tail.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if tail.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok()?,
        None => default_port,
    };
    Some((scheme.to_owned(), host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        "127.0.0.1:7878".parse().unwrap()
    }

    #[test]
    fn a_loopback_listener_serves_loopback_names_only() {
        let access = Access::new(loopback(), None, Origins::Local);
        for ok in [
            "127.0.0.1:7878",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(access.host_allowed(Some(ok)), "{ok}");
        }
        assert!(access.host_allowed(None));
        for bad in [
            "evil.example:7878",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "127.0.0.1:notaport",
            "",
            "[::1",
        ] {
            assert!(!access.host_allowed(Some(bad)), "{bad}");
        }
    }

    #[test]
    fn allowed_hosts_add_names_and_open_other_listeners() {
        let access = Access::new(loopback(), Some(vec!["Box.Local".into()]), Origins::Local);
        assert!(access.host_allowed(Some("box.local:7878")));
        assert!(access.host_allowed(Some("localhost:7878")));
        assert!(!access.host_allowed(Some("evil.example")));
        let any = Access::new(loopback(), Some(vec!["*".into()]), Origins::Local);
        assert!(any.host_allowed(Some("evil.example")));
        let public = Access::new("0.0.0.0:80".parse().unwrap(), None, Origins::Local);
        assert!(public.host_allowed(Some("192.168.1.5")));
        assert!(check_hosts(&["a.example".into(), "[fd00::1]".into(), "*".into()]).is_ok());
        assert_eq!(
            check_hosts(&["ok".into(), "http://x".into()])
                .unwrap_err()
                .0,
            1
        );
        assert!(check_hosts(&["*.example".into()]).is_err());
    }

    #[test]
    fn origins() {
        let local = Origins::Local;
        assert!(local.allows(None));
        for ok in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:8080",
            "HTTP://LOCALHOST",
        ] {
            assert!(local.allows(Some(ok)), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
            "file://",
            "http://127.0.0.1.evil:80",
            "http://localhost:3000/path",
        ] {
            assert!(!local.allows(Some(bad)), "{bad}");
        }
        assert!(Origins::None.allows(None));
        assert!(!Origins::None.allows(Some("http://localhost")));
    }

    #[test]
    fn a_page_the_listener_served_is_same_origin() {
        let access = Access::new(
            "0.0.0.0:7878".parse().unwrap(),
            None,
            Origins::List(vec!["https://app.example".into()]),
        );
        assert!(access.origin_allowed(Some("http://box.lan:7878"), Some("box.lan:7878")));
        assert!(!access.origin_allowed(Some("http://evil.example"), Some("box.lan:7878")));
        let hooks = Access::new(loopback(), None, Origins::None);
        assert!(!hooks.origin_allowed(Some("http://127.0.0.1:7878"), Some("127.0.0.1:7878")));
    }

    #[test]
    fn checks_name_their_reason() {
        let access = Access::new(loopback(), None, Origins::Local);
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:7878".parse().unwrap());
        assert!(access.check(&headers).is_ok());
        headers.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert_eq!(
            access.check(&headers).unwrap_err().reason,
            "forbidden_origin"
        );
        headers.insert(header::HOST, "evil.example:7878".parse().unwrap());
        assert_eq!(access.check(&headers).unwrap_err().reason, "forbidden_host");
    }

    #[test]
    fn an_http2_authority_is_the_host() {
        let access = Access::new(loopback(), None, Origins::None);
        let none = HeaderMap::new();
        assert!(
            access
                .check_with_authority(&none, Some("localhost:4317"))
                .is_ok()
        );
        assert_eq!(
            access
                .check_with_authority(&none, Some("evil.example:4317"))
                .unwrap_err()
                .reason,
            "forbidden_host"
        );
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:4317".parse().unwrap());
        assert!(
            access
                .check_with_authority(&headers, Some("evil.example"))
                .is_err(),
            "both are checked"
        );
        headers.insert(header::ORIGIN, "http://127.0.0.1:4317".parse().unwrap());
        assert!(
            access
                .check_with_authority(&none, Some("127.0.0.1:4317"))
                .is_ok()
        );
        assert_eq!(
            access
                .check_with_authority(&headers, Some("127.0.0.1:4317"))
                .unwrap_err()
                .reason,
            "forbidden_origin"
        );
    }
}
