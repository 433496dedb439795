//! A one-connection TCP stand-in for probe tests: it reads one HTTP request head and
//! answers it with given bytes (or stays silent), so a probe meets a real peer that
//! answers wrongly, slowly or not at all.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// A stand-in listening on a free loopback port.
pub struct StandIn {
    /// Its address, `127.0.0.1:PORT`.
    pub addr: String,
    head: oneshot::Receiver<Vec<u8>>,
}

impl StandIn {
    /// The request head it read (empty when the connection ended before a whole head).
    pub async fn request_head(self) -> Vec<u8> {
        self.head.await.unwrap_or_default()
    }
}

/// Listens for one connection, reads its request head, then writes `response` (or, when
/// it is `None`, keeps the connection open without a word).
pub async fn answer_once(response: Option<&'static [u8]>) -> StandIn {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (head_tx, head) = oneshot::channel();
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.ends_with(b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let _ = head_tx.send(request);
        match response {
            Some(response) => {
                let _ = stream.write_all(response).await;
            }
            None => std::future::pending::<()>().await,
        }
    });
    StandIn { addr, head }
}
