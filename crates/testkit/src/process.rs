//! The `patchbay` binary as a process under test: started, asked, stopped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running process that gets SIGTERM (then is waited for) when dropped, even when an
/// assertion fails.
#[derive(Debug)]
pub struct Daemon(pub Child);

impl Daemon {
    /// Sends SIGTERM and waits for the exit status; panics (after SIGKILL) when the
    /// process has not ended a minute later, a guard against a hang.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let guard = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                return status;
            }
            if guard.elapsed() > Duration::from_secs(60) {
                let _ = self.0.kill();
                panic!("the process did not end within a minute of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (`HUP`, `TERM`, …).
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.0.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} failed");
    }
}

impl Drop for Daemon {
    /// SIGTERM, then SIGKILL when the process is still there a minute later: a failed
    /// test never hangs on a daemon that does not stop.
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let guard = Instant::now();
            while matches!(self.0.try_wait(), Ok(None)) && guard.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, even when an assertion
/// fails: for peers and stand-ins whose way of ending the test does not check.
#[derive(Debug)]
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP port free on loopback now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A minimal HTTP/1.1 request on a fresh connection; returns (status, body).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let head = request_head(method, path, &addr.to_string(), headers, body.len());
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    Ok(status_and_body(&response))
}

/// The head of an HTTP/1.1 request with `Connection: close` and a body of `body_len`
/// bytes, ending with its blank line.
pub fn request_head(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body_len: usize,
) -> String {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {body_len}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// The status and the body of a whole HTTP/1.1 response read to its end (status 0 when
/// there is none, the body empty when there is no blank line).
pub fn status_and_body(response: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(response);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Polls `check` until it returns `Some` (every 25 ms); panics with `what` after a
/// minute, a guard against a hang, not a timing assertion.
pub fn wait_until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let guard = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}
