//! Case `http`: enqueue through `outbox-server` over HTTP (16 keep-alive connections) against the same
//! enqueues made in process by 16 tasks on the pool; and the event stream's delivery latency, from an
//! enqueue's commit to the `enqueued` event reaching a client of `GET /api/events`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use outbox::EnqueueOpts;
use outbox_server::ServerOpts;
use sea_orm::DatabaseConnection;

use crate::BoxError;
use crate::latency::Latency;
use crate::scratch::{Scratch, Target};
use crate::stats::Measure;
use crate::subject::OrderPlaced;

/// Connections (and tasks) enqueuing at once.
pub(crate) const CONNECTIONS: u64 = 16;
/// Jobs whose delivery latency is measured per run.
const LATENCY_JOBS: u64 = 1_000;

/// One run of the case: HTTP enqueue, in-process enqueue, and stream latency.
pub(crate) struct HttpRun {
    pub(crate) http: Measure,
    pub(crate) in_process: Measure,
    pub(crate) latency: Latency,
}

/// A server on a loopback port for `db` that knows `kind`; stops when the returned task is aborted.
pub(crate) async fn serve(
    db: &DatabaseConnection,
    kind: Arc<outbox::Kind>,
) -> Result<(String, tokio::task::JoinHandle<()>), BoxError> {
    let opts = ServerOpts::new().kind(kind);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = outbox_server::router(db.clone(), opts);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((base, task))
}

pub(crate) fn client() -> Result<reqwest::Client, BoxError> {
    Ok(reqwest::Client::builder().no_proxy().pool_max_idle_per_host(CONNECTIONS as usize).build()?)
}

/// `n` jobs over HTTP, `CONNECTIONS` requests in flight at a time, each to its own next order id.
async fn enqueue_http(base: &str, n: u64, first: u64) -> Result<Measure, BoxError> {
    let client = client()?;
    let url = format!("{base}/api/jobs");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            while i < n {
                let body = serde_json::json!({"kind": "order_placed", "payload": {"order_id": first + i}});
                let resp = client.post(&url).json(&body).send().await?;
                if resp.status() != 201 {
                    return Err(format!("enqueue over HTTP answered {}: {}", resp.status(), resp.text().await?).into());
                }
                i += CONNECTIONS;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(Measure { jobs: n, secs: start.elapsed().as_secs_f64() })
}

/// The same `n` enqueues made in process, `CONNECTIONS` tasks at a time on the pool.
async fn enqueue_in_process(db: &DatabaseConnection, n: u64, first: u64) -> Result<Measure, BoxError> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            while i < n {
                let job = OrderPlaced { order_id: first + i };
                if !outbox::enqueue(&db, &job, EnqueueOpts::new()).await?.is_new() {
                    return Err(format!("in-process enqueue: job {i} collapsed onto another").into());
                }
                i += CONNECTIONS;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(Measure { jobs: n, secs: start.elapsed().as_secs_f64() })
}

/// Enqueues `LATENCY_JOBS` jobs one at a time (a millisecond apart) while a client reads the stream, and
/// measures from each enqueue's return (its commit, acknowledged) to its event's arrival. An event can beat
/// the return of a fast commit (the stream is woken inside the enqueue call); it counts as 0.
async fn stream_latency(db: &DatabaseConnection, base: &str, first: u64) -> Result<Latency, BoxError> {
    let resp = client()?.get(format!("{base}/api/events?event=enqueued")).send().await?;
    if resp.status() != 200 {
        return Err(format!("the event stream answered {}", resp.status()).into());
    }
    let mut body = resp.bytes_stream();
    let committed: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let writer = {
        let (db, committed) = (db.clone(), Arc::clone(&committed));
        tokio::spawn(async move {
            for i in 0..LATENCY_JOBS {
                let job = OrderPlaced { order_id: first + i };
                let id = outbox::enqueue(&db, &job, EnqueueOpts::new()).await?.id().to_owned();
                committed.lock().map_err(|_| "lock poisoned")?.insert(id, Instant::now());
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok::<_, BoxError>(())
        })
    };
    let mut arrived: HashMap<String, Instant> = HashMap::new();
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while (arrived.len() as u64) < LATENCY_JOBS {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .map_err(|_| "the event stream stalled")?
            .ok_or("the event stream ended")??;
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..end + 2).collect();
            for line in String::from_utf8_lossy(&block).lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    let event: serde_json::Value = serde_json::from_str(data.trim())?;
                    if let Some(job) = event["job_id"].as_str() {
                        arrived.insert(job.to_owned(), now);
                    }
                }
            }
        }
    }
    writer.await??;
    let committed = committed.lock().map_err(|_| "lock poisoned")?;
    let ms: Vec<f64> = arrived
        .iter()
        .filter_map(|(id, at)| committed.get(id).map(|c| at.saturating_duration_since(*c).as_secs_f64() * 1000.0))
        .collect();
    Ok(Latency::of(ms))
}

/// One run on a fresh database.
pub(crate) async fn run(target: &Target, n: u64) -> Result<HttpRun, BoxError> {
    let scratch = Scratch::new(target).await?;
    outbox::Kind::of::<OrderPlaced>()?;
    let (base, server) = serve(&scratch.db, outbox::Kind::of::<OrderPlaced>()?).await?;
    let http = enqueue_http(&base, n, 0).await?;
    let in_process = enqueue_in_process(&scratch.db, n, n).await?;
    let latency = stream_latency(&scratch.db, &base, 2 * n).await?;
    server.abort();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", 2 * n + LATENCY_JOBS, "http").await?;
    scratch.remove().await?;
    Ok(HttpRun { http, in_process, latency })
}
