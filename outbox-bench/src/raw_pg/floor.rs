//! The floor of `latency_cross` on PostgreSQL: bare sqlx doing the same enqueues and claims as the case, its
//! worker told in the enqueuing process or, in a child process (`--latency-floor-child`), woken by `LISTEN`.

use std::sync::Arc;
use std::time::Instant;

use sea_orm::sqlx::{self, Connection, Row};

use super::sql::{LEASE_MS, QUEUE, bind_row, claim_sql, finish_sql, insert_job_sql, query};
use super::{connect, connect_generic};
use crate::BoxError;
use crate::raw::{JobRow, KindInfo, now_ms};

/// How a `latency_cross` floor's worker learns of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// In the enqueuing process, told after each commit returns (outbox's in-process wake-up).
    InProcess,
    /// In another process, through `LISTEN` on a connection of its own; it claims on a second connection, as
    /// the worker does.
    Listen,
    /// As [`Wake::Listen`], claiming on the listening connection itself.
    ListenAndClaim,
}

impl Wake {
    fn arg(self) -> &'static str {
        match self {
            Wake::InProcess => "in-process",
            Wake::Listen => "listen",
            Wake::ListenAndClaim => "listen-and-claim",
        }
    }

    pub(crate) fn parse(arg: &str) -> Result<Wake, BoxError> {
        [Wake::InProcess, Wake::Listen, Wake::ListenAndClaim]
            .into_iter()
            .find(|w| w.arg() == arg)
            .ok_or_else(|| format!("unknown wake-up `{arg}`").into())
    }
}

/// The floor of `latency_cross` on PostgreSQL: the same enqueues (one autocommit INSERT each, [`gap`] apart,
/// the insert trigger notifying) and the worker's claim statement, with nothing else around them. Each job is
/// timed from its INSERT returning to the claim that took it returning, on the wall clock both processes
/// share.
///
/// [`gap`]: crate::latency::gap
pub(crate) async fn latency_floor(
    url: &str,
    kind: &KindInfo,
    n: u64,
    wake: Wake,
) -> Result<crate::latency::Latency, BoxError> {
    let told = Arc::new(tokio::sync::Notify::new());
    let worker = if wake == Wake::InProcess {
        let (url, name, told) = (url.to_owned(), kind.name.to_owned(), Arc::clone(&told));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move { floor_worker(&url, &name, n, wake, Some(told), ready_tx).await });
        ready_rx.await?;
        FloorWorker::Task(task)
    } else {
        let args = [FLOOR_CHILD, url, kind.name, &n.to_string(), wake.arg()].map(std::ffi::OsString::from);
        FloorWorker::Process(Box::new(crate::latency::WorkerProcess::start(&args, "latency floor").await?))
    };
    let mut conn = connect(url).await?;
    let insert: Arc<str> = insert_job_sql(kind).into();
    let mut committed: Vec<(String, i64)> = Vec::with_capacity(usize::try_from(n)?);
    let mut next = tokio::time::Instant::now();
    for i in 0..n {
        let row = JobRow::new(kind, i, now_ms());
        let id = row.id.clone();
        bind_row(query(&insert), row).execute(&mut conn).await?;
        committed.push((id, crate::latency::epoch_us()));
        told.notify_one();
        next += crate::latency::gap(i);
        tokio::time::sleep_until(next).await;
    }
    conn.close().await?;
    let started: std::collections::HashMap<String, i64> = match worker {
        FloorWorker::Task(task) => task.await??,
        FloorWorker::Process(mut child) => {
            let report = child.report().await?;
            child.exit().await?;
            serde_json::from_str(&report)?
        }
    };
    let ms = committed
        .iter()
        .map(|(id, at)| match started.get(id) {
            Some(start) => Ok((start - at).max(0) as f64 / 1000.0),
            None => Err(format!("latency floor: job {id} was never claimed")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(crate::latency::Latency::of(ms))
}

/// Where a floor's worker runs: a task of this process, or another process.
enum FloorWorker {
    Task(tokio::task::JoinHandle<Result<std::collections::HashMap<String, i64>, BoxError>>),
    Process(Box<crate::latency::WorkerProcess>),
}

/// The floor's worker: waits to be told (in-process) or for a notification, then claims until nothing is
/// left, noting when each job's claim returned; a one-second poll as the worker has. Says it is ready once
/// its first, empty claim has gone by; returns once all `n` jobs were claimed, or 10 s after the last one was.
pub(crate) async fn floor_worker(
    url: &str,
    kind: &str,
    n: u64,
    wake: Wake,
    told: Option<Arc<tokio::sync::Notify>>,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<std::collections::HashMap<String, i64>, BoxError> {
    use sea_orm::sqlx::postgres::PgListener;
    let mut conn = connect_generic(url).await?;
    let mut listener = match wake {
        Wake::InProcess => None,
        Wake::Listen | Wake::ListenAndClaim => {
            let mut l = PgListener::connect(url).await?;
            l.listen("outbox_jobs").await?;
            sqlx::raw_sql("SET plan_cache_mode = force_generic_plan").execute(&mut l).await?;
            Some(l)
        }
    };
    let worker_id = format!("bench-floor:{}", std::process::id());
    let kinds = vec![kind.to_owned()];
    let queues = vec![QUEUE.to_owned()];
    let claim: Arc<str> = claim_sql().into();
    // Completions go out on a connection of their own, as the worker writes its outcomes, while it claims on.
    // Each message is one claim: its jobs with their attempts, and its row in `outbox_claims`.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Vec<(String, i32)>, Option<i64>)>();
    let finisher = {
        let (url, worker_id) = (url.to_owned(), worker_id.clone());
        tokio::spawn(async move {
            let mut conn = connect_generic(&url).await?;
            let finish: Arc<str> = finish_sql().into();
            while let Some((mut jobs, claim)) = done_rx.recv().await {
                let mut claims: Vec<i64> = claim.into_iter().collect();
                while let Ok((more, claim)) = done_rx.try_recv() {
                    jobs.extend(more);
                    claims.extend(claim);
                }
                jobs.sort();
                let outcomes: serde_json::Map<String, serde_json::Value> =
                    jobs.iter().map(|(id, attempt)| (id.clone(), serde_json::json!(attempt))).collect();
                let ids: Vec<String> = jobs.into_iter().map(|(id, _)| id).collect();
                let done = query(&finish)
                    .bind(&ids)
                    .bind(serde_json::Value::Object(outcomes))
                    .bind(now_ms())
                    .bind(&worker_id)
                    .bind(claims)
                    .fetch_all(&mut conn)
                    .await?;
                if done.len() != ids.len() {
                    return Err(format!("latency floor: {} of {} jobs completed", done.len(), ids.len()).into());
                }
            }
            Ok::<_, BoxError>(())
        })
    };
    let mut started = std::collections::HashMap::with_capacity(usize::try_from(n)?);
    let mut ready = Some(ready);
    let mut progress = Instant::now();
    while (started.len() as u64) < n && progress.elapsed() < std::time::Duration::from_secs(10) {
        loop {
            let now = now_ms();
            let q =
                query(&claim).bind(&worker_id).bind(now).bind(now + LEASE_MS).bind(&kinds).bind(100_i64).bind(&queues);
            let rows = match (wake, listener.as_mut()) {
                (Wake::ListenAndClaim, Some(l)) => q.fetch_all(l).await?,
                _ => q.fetch_all(&mut conn).await?,
            };
            let at = crate::latency::epoch_us();
            if rows.is_empty() {
                break;
            }
            progress = Instant::now();
            let claim: Option<i64> = rows.first().map(|r| r.try_get(8)).transpose()?.flatten();
            let mut done = Vec::with_capacity(rows.len());
            for row in rows {
                let id: String = row.try_get(0)?;
                done.push((id.clone(), row.try_get::<i32, _>(4)?));
                started.insert(id, at);
            }
            done_tx.send((done, claim))?;
        }
        if let Some(r) = ready.take() {
            let _ = r.send(());
        }
        let poll = std::time::Duration::from_secs(1);
        match (&told, listener.as_mut()) {
            (Some(t), _) => {
                let _ = tokio::time::timeout(poll, t.notified()).await;
            }
            (None, Some(l)) => {
                let _ = tokio::time::timeout(poll, l.recv()).await;
            }
            (None, None) => return Err("latency floor: a worker with no wake-up".into()),
        }
    }
    drop(done_tx);
    finisher.await??;
    Ok(started)
}

/// The hidden first argument that makes this binary the worker process of a `latency_cross` floor on
/// PostgreSQL: `--latency-floor-child <URL> <kind> <jobs> <listen|listen-and-claim>`.
pub(crate) const FLOOR_CHILD: &str = "--latency-floor-child";

pub(crate) fn floor_child(argv: &[String]) -> Result<(), BoxError> {
    let [url, kind, jobs, wake] = argv else {
        return Err(format!("usage: {FLOOR_CHILD} <URL> <kind> <jobs> <wake>").into());
    };
    let (jobs, wake): (u64, Wake) = (jobs.parse()?, Wake::parse(wake)?);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (url, kind) = (url.clone(), kind.clone());
        let task = tokio::spawn(async move { floor_worker(&url, &kind, jobs, wake, None, ready_tx).await });
        ready_rx.await?;
        println!("ready");
        let started = task.await??;
        println!("{}", serde_json::to_string(&started)?);
        Ok(())
    })
}
