//! A real HTTP server on 127.0.0.1 that answers from a script and records the requests it saw, for testing
//! HTTP clients against real sockets.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(&'static str, &'static str)>,
    /// Body (sent with `content-type: application/json` unless a header says otherwise).
    pub body: String,
    /// How long to wait before answering.
    pub delay: Duration,
}

/// A reply with `status` and `body`, at once.
pub fn reply(status: u16, body: String) -> Reply {
    Reply { status, headers: Vec::new(), body, delay: Duration::ZERO }
}

/// What the server saw: header names lowercased.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request line (`POST /v1/messages HTTP/1.1`).
    pub line: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// When its request was read whole.
    pub at: std::time::Instant,
}

impl Seen {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The running server; it lives as long as the test's runtime.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// Starts answering with `replies` in order (500 once they run out).
    pub async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer(socket, Arc::clone(&replies), Arc::clone(&record)));
            }
        });
        Self { base, seen }
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn answer(mut socket: TcpStream, replies: Arc<Mutex<VecDeque<Reply>>>, seen: Arc<Mutex<Vec<Seen>>>) {
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    seen.lock().expect("lock").push(Seen { line, headers, body, at: std::time::Instant::now() });
    let next = replies.lock().expect("lock").pop_front();
    let reply = next.unwrap_or_else(|| reply(500, "no scripted reply left".into()));
    tokio::time::sleep(reply.delay).await;
    let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
    if !reply.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type")) {
        out.push_str("content-type: application/json\r\n");
    }
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n{}", reply.body.len(), reply.body));
    let _ = socket.write_all(out.as_bytes()).await;
    let _ = socket.shutdown().await;
}
