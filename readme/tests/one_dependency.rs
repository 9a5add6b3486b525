//! A new user's first program, in a crate that depends on `outbox`, `serde` and `tokio` only: it defines
//! a job kind, enqueues it in a transaction with a domain row, and runs a worker that executes it.

use std::time::Duration;

use outbox::prelude::*;
use outbox::serde_json::json;
use serde::{Deserialize, Serialize};

#[derive(Job, Debug, Serialize, Deserialize, JsonSchema)]
#[job(kind = "send_welcome", max_attempts = 5)]
struct SendWelcome {
    #[job(key)]
    user_id: i64,
    email: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn define_enqueue_in_a_transaction_and_work() -> Result<(), outbox::Error> {
    let dir = tempfile::tempdir().map_err(|e| outbox::Error::Invalid(format!("creating a temp dir: {e}")))?;
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("app.db").display());
    let db = outbox::connect(&url).await?;
    outbox::migrate(&db).await?;
    db.execute_unprepared("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL)").await?;

    let email = "ann@example.com".to_owned();
    let job = outbox::transaction(&db, async |txn| {
        txn.execute_unprepared(&format!("INSERT INTO users (id, email) VALUES (7, '{email}')")).await?;
        outbox::enqueue(txn, &SendWelcome { user_id: 7, email }, EnqueueOpts::new()).await
    })
    .await?;

    let worker = Worker::builder(&db)
        .register(|job: SendWelcome, ctx: JobContext| async move {
            Ok::<_, JobError>(json!({ "sent_to": job.email, "attempt": ctx.attempt() }))
        })
        .build()
        .await?
        .start();
    let done = outbox::ops::wait(&db, job.id(), Duration::from_secs(30)).await?;
    worker.shutdown().await?;
    assert_eq!(done.status, outbox::JobStatus::Completed);
    assert_eq!(done.output, Some(json!({ "sent_to": "ann@example.com", "attempt": 1 })));
    Ok(())
}
