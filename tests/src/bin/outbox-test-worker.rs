//! A worker process for the crash and race tests.
//!
//! `outbox-test-worker DB_PATH RUN_LOG MODE LEASE_MS`; MODE is `drain` (run `race` jobs until none is due,
//! appending each run's job id to RUN_LOG) or `hang` (on the first `race` job, write RUN_LOG and hang).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{JobContext, JobError, Worker};
use outbox_tests::{Race, sqlite_url};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, db_path, run_log, mode, lease_ms] = args.as_slice() else {
        return Err("usage: outbox-test-worker DB_PATH RUN_LOG drain|hang LEASE_MS".into());
    };
    let lease = Duration::from_millis(lease_ms.parse()?);
    let db = outbox_core::connect(&sqlite_url(db_path.as_ref())).await?;
    let log = Arc::new(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(run_log)?));
    let hang = mode == "hang";
    let worker = Worker::builder(&db)
        .concurrency(8)
        .lease(lease)
        .poll_interval(Duration::from_millis(50))
        .register(move |job: Race, ctx: JobContext| {
            let log = Arc::clone(&log);
            async move {
                {
                    let mut f = log.lock().map_err(|_| JobError::permanent("run log lock poisoned"))?;
                    writeln!(f, "{} {}", ctx.id(), job.n)?;
                    f.flush()?;
                }
                if hang {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await?;
    worker.drain().await?;
    Ok(())
}
