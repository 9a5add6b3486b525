//! Case `dashboard`: with `n` jobs in the database (most completed, some failed, some pending), how long
//! the dashboard's jobs page and overview take to get what they ask for when they open: each page's API
//! requests issued at once, as the page issues them, to a server that has just started (nothing cached).

use std::time::Instant;

use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde::Serialize;

use crate::scratch::{Scratch, Target};
use crate::subject::{Noop, drain, noops, preload};
use crate::{BoxError, CONCURRENCY};

/// Jobs left pending, and jobs turned failed, of the `n`.
const PENDING: u64 = 5_000;
const FAILED: u64 = 2_000;

/// What the jobs page asks for first: its filters' choices and the newest page of jobs.
const JOBS_PAGE: [&str; 4] = ["/api/session", "/api/kinds", "/api/queues", "/api/jobs?limit=50"];
/// What the overview asks for first.
const OVERVIEW: [&str; 6] = [
    "/api/session",
    "/api/stats?window=1h",
    "/api/queues",
    "/api/activity?window=1h&bucket=1m",
    "/api/workers",
    "/api/health",
];

/// One run: each page's time to its last answer, ms.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct PageTimes {
    pub(crate) jobs_page_ms: f64,
    pub(crate) overview_ms: f64,
}

pub(crate) async fn run(target: &Target, n: u64) -> Result<PageTimes, BoxError> {
    let scratch = Scratch::new(target).await?;
    let finished = n.saturating_sub(PENDING);
    preload(&scratch.db, noops(finished)).await?;
    drain::<Noop>(&scratch.db, CONCURRENCY).await?;
    let failed = format!(
        "UPDATE outbox_jobs SET status = 'failed', last_error = 'the bench failed it' \
         WHERE id IN (SELECT id FROM outbox_jobs WHERE status = 'completed' ORDER BY id LIMIT {FAILED})"
    );
    scratch.db.execute_unprepared(&failed).await?;
    preload(&scratch.db, noops(n - finished)).await?;
    let jobs_page_ms = page(&scratch.db, &JOBS_PAGE).await?;
    let overview_ms = page(&scratch.db, &OVERVIEW).await?;
    scratch.remove().await?;
    Ok(PageTimes { jobs_page_ms, overview_ms })
}

/// Starts a server, requests the page and then every path at once, and returns the time from the page's
/// request to the last answer, ms. Every answer must be a success.
async fn page(db: &DatabaseConnection, paths: &[&str]) -> Result<f64, BoxError> {
    let (base, server) = crate::http::serve(db, outbox::Kind::of::<Noop>()?).await?;
    let client = crate::http::client()?;
    let get = |path: String| {
        let request = client.get(format!("{base}{path}"));
        async move {
            let started = Instant::now();
            let response = request.send().await?;
            let status = response.status();
            let body = response.bytes().await?;
            if !status.is_success() {
                return Err(format!("{path} answered {status}: {}", String::from_utf8_lossy(&body)).into());
            }
            Ok::<_, BoxError>((path, started.elapsed().as_secs_f64() * 1_000.0))
        }
    };
    let start = Instant::now();
    get("/".to_owned()).await?;
    let answers = futures_util::future::join_all(paths.iter().map(|p| get((*p).to_owned()))).await;
    let ms = start.elapsed().as_secs_f64() * 1_000.0;
    server.abort();
    let answers = answers.into_iter().collect::<Result<Vec<(String, f64)>, BoxError>>()?;
    let each: Vec<String> = answers.iter().map(|(path, ms)| format!("{path} {ms:.1} ms")).collect();
    eprintln!("  {ms:.1} ms: {}", each.join(", "));
    Ok(ms)
}
