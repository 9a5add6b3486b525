//! An `outbox-server` router served on a loopback port for a test, and a Server-Sent Events reader.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use outbox_server::ServerOpts;
use sea_orm::DatabaseConnection;

/// An HTTP client for loopback servers (plain http, no proxy).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("http client")
}

/// A router serving on `127.0.0.1:<port>` until dropped.
pub struct Served {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The bound address.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Serves `outbox_server::router(db, opts)` on a free loopback port.
    pub async fn start(db: &DatabaseConnection, opts: ServerOpts) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let app = outbox_server::router(db.clone(), opts);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Served { base: format!("http://{addr}"), addr, task }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `id:` field.
    pub id: String,
    /// Its `event:` field.
    pub event: String,
    /// Its `data:` lines joined.
    pub data: String,
}

impl SseEvent {
    /// The data as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }
}

/// A stream of Server-Sent Events over one response.
pub struct SseReader {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl SseReader {
    /// Opens `url` with these headers; panics unless it answers 200 with an event stream.
    pub async fn open(url: &str, headers: &[(&str, &str)]) -> SseReader {
        let mut req = http_client().get(url).header("accept", "text/event-stream");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("open the event stream");
        assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
        let kind = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        SseReader { body: Box::pin(resp.bytes_stream()), buf: Vec::new() }
    }

    /// The next event (comments and keep-alives skipped), or `None` when `timeout` passes first.
    pub async fn next(&mut self, timeout: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(block).expect("event stream is UTF-8");
                let (mut id, mut event, mut data) = (String::new(), String::new(), Vec::new());
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim_start().to_owned();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim_start().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                    }
                }
                if !data.is_empty() {
                    return Some(SseEvent { id, event, data: data.join("\n") });
                }
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk.expect("read the event stream")),
                Ok(None) | Err(_) => return None,
            }
        }
    }
}
