//! URLs as they may be logged, put in errors or shown in health details.

use std::fmt;

/// Query parameters whose values are secrets (compared case-insensitively).
pub const SECRET_QUERY_KEYS: [&str; 8] = [
    "token",
    "access_token",
    "api_key",
    "key",
    "password",
    "secret",
    "auth",
    "apikey",
];

/// Displays a URL with its password and the values of token-like query parameters
/// ([`SECRET_QUERY_KEYS`]) replaced by `***`: `wss://me:***@host/ws?token=***&room=1`.
/// Every URL a transport logs, reports or puts in an error goes through this.
#[derive(Clone, Copy)]
pub struct RedactedUrl<'a>(pub &'a str);

impl fmt::Display for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.0.trim();
        let (scheme, rest) = match url.find("://") {
            Some(at) => url.split_at(at + 3),
            None => ("", url),
        };
        f.write_str(scheme)?;
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        match authority.rfind('@') {
            Some(at) => {
                let (userinfo, host) = authority.split_at(at);
                match userinfo.split_once(':') {
                    Some((user, _password)) => write!(f, "{user}:***{host}")?,
                    None => write!(f, "{userinfo}{host}")?,
                }
            }
            None => f.write_str(authority)?,
        }
        let (before_fragment, fragment) = match tail.find('#') {
            Some(at) => tail.split_at(at),
            None => (tail, ""),
        };
        let Some((path, query)) = before_fragment.split_once('?') else {
            f.write_str(before_fragment)?;
            return f.write_str(fragment);
        };
        write!(f, "{path}?")?;
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                f.write_str("&")?;
            }
            match pair.split_once('=') {
                Some((key, _)) if is_secret_key(key) => write!(f, "{key}=***")?,
                _ => f.write_str(pair)?,
            }
        }
        f.write_str(fragment)
    }
}

impl fmt::Debug for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

fn is_secret_key(key: &str) -> bool {
    SECRET_QUERY_KEYS
        .iter()
        .any(|secret| key.eq_ignore_ascii_case(secret))
}

#[cfg(test)]
mod tests {
    use super::RedactedUrl;

    fn shown(url: &str) -> String {
        RedactedUrl(url).to_string()
    }

    #[test]
    fn passwords_and_token_parameters_are_hidden() {
        assert_eq!(
            shown("wss://me:hunter2@agent.example:443/ws?Token=abc&room=1#top"),
            "wss://me:***@agent.example:443/ws?Token=***&room=1#top"
        );
        assert_eq!(
            shown("http://h/x?access_token=a&API_KEY=b&key=c&password=d&secret=e&auth=f&keep=g"),
            "http://h/x?access_token=***&API_KEY=***&key=***&password=***&secret=***&auth=***&keep=g"
        );
        assert_eq!(shown("ws://127.0.0.1:9/path"), "ws://127.0.0.1:9/path");
        assert_eq!(shown("ws://user@h?tokenish=1"), "ws://user@h?tokenish=1");
        assert_eq!(shown("ws://u:p@h"), "ws://u:***@h");
        assert_eq!(shown("  ws://h/?token  "), "ws://h/?token");
    }

    #[test]
    fn an_at_sign_in_the_path_is_not_userinfo() {
        assert_eq!(shown("http://h/a@b?x=1"), "http://h/a@b?x=1");
    }
}
