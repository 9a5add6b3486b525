//! A real server on 127.0.0.1 for each test, and a real HTTP client that reads its JSON answers.

use std::sync::Arc;

use outbox::Kind;
use outbox_server::{Role, ServerOpts, Token};
use outbox_tests::{Probe, TestDb};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// The secrets of the tokens [`Server::start`] configures, one per role.
pub(crate) const READ: &str = "read-secret-0123456789";
pub(crate) const OPERATE: &str = "operate-secret-0123456789";
pub(crate) const WORK: &str = "work-secret-0123456789";

/// A server answering on a loopback port, and a client for it.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One answer: status, headers and the body, which every answer of the API has as JSON.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

impl Answer {
    /// Asserts a successful `status` and returns the body.
    #[track_caller]
    pub(crate) fn ok(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{:?}", self.body);
        &self.body
    }

    /// Asserts an error answer with `status` and `code`, and returns its message.
    #[track_caller]
    pub(crate) fn error(&self, status: u16, code: &str) -> &str {
        assert_eq!((self.status, self.body["code"].as_str()), (status, Some(code)), "{:?}", self.body);
        let message = self.body["message"].as_str().expect("an error has a message");
        assert!(!message.is_empty() && message.starts_with(|c: char| !c.is_uppercase()), "{message}");
        message
    }
}

/// The options of most tests: a token of each role, and `probe` as a built-in kind.
pub(crate) fn opts() -> ServerOpts {
    ServerOpts::new()
        .token(Token::new(Role::Read, READ).expect("token"))
        .token(Token::new(Role::Operate, OPERATE).expect("token"))
        .token(Token::new(Role::Work, WORK).expect("token"))
        .kind(probe())
}

pub(crate) fn probe() -> Arc<Kind> {
    Kind::of::<Probe>().expect("probe kind")
}

impl Server {
    /// Serves `t`'s database with [`opts`].
    pub(crate) async fn start(t: &TestDb) -> Server {
        Server::with(t, opts()).await
    }

    /// Serves `t`'s database with `opts`, the router mounted as it is, and a client for it.
    pub(crate) async fn with(t: &TestDb, opts: ServerOpts) -> Server {
        Server::mounted(outbox_server::router(t.db.clone(), opts), "").await
    }

    /// Serves `app`, whose API answers under `prefix`.
    pub(crate) async fn mounted(app: axum::Router, prefix: &str) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        let client = outbox_tests::http_client();
        Server { base: format!("http://{addr}{prefix}"), client, task }
    }

    /// A request to `path` with `token` as its bearer token.
    pub(crate) fn request(&self, method: Method, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request` and reads the answer, which must be JSON.
    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("send");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(content_type.starts_with("application/json"), "{status} answered {content_type:?}: {text}");
        let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} answered non-JSON ({e}): {text}"));
        Answer { status, headers, body }
    }

    /// `GET path` with the read token.
    pub(crate) async fn get(&self, path: &str) -> Answer {
        self.send(self.request(Method::GET, path, Some(READ))).await
    }

    /// `method path` with the operate token and `body` as JSON.
    pub(crate) async fn operate(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        let request = self.request(method, path, Some(OPERATE));
        self.send(match body {
            Some(body) => request.json(&body),
            None => request,
        })
        .await
    }

    /// `POST /api/jobs` with the operate token.
    pub(crate) async fn enqueue(&self, body: Value) -> Answer {
        self.operate(Method::POST, "/api/jobs", Some(body)).await
    }
}
