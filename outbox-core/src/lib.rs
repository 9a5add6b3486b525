//! # outbox-core
//!
//! A transactional outbox job queue on sea-orm: write a domain change and the job that carries its side
//! effect in one transaction; a worker then runs the job at least once, with retries, leases and rescue.
//!
//! ```
//! use outbox_core::{EnqueueOpts, Job, Worker, JobContext, JobError};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Job, Serialize, Deserialize, JsonSchema)]
//! #[job(kind = "send_welcome", max_attempts = 5)]
//! struct SendWelcome {
//!     #[job(key)]
//!     user_id: i64,
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), outbox_core::Error> {
//! # let dir = tempfile::tempdir().expect("temp dir");
//! # let url = format!("sqlite://{}?mode=rwc", dir.path().join("outbox.db").display());
//! let db = outbox_core::connect(&url).await?;
//! outbox_core::migrate(&db).await?;
//!
//! // The job commits (or rolls back) with whatever else the transaction writes.
//! let first = outbox_core::transaction(&db, |txn| {
//!     Box::pin(async move { outbox_core::enqueue(txn, &SendWelcome { user_id: 7 }, EnqueueOpts::new()).await })
//! })
//! .await?;
//! // The same intent again collapses onto the pending job.
//! let again = outbox_core::enqueue(&db, &SendWelcome { user_id: 7 }, EnqueueOpts::new()).await?;
//! assert!(first.is_new() && !again.is_new() && first.id() == again.id());
//!
//! Worker::builder(&db)
//!     .register(|job: SendWelcome, _ctx: JobContext| async move {
//!         println!("welcome, user {}", job.user_id);
//!         Ok::<_, JobError>(())
//!     })
//!     .build()
//!     .await?
//!     .drain()
//!     .await?;
//! assert_eq!(outbox_core::ops::get(&db, first.id()).await?.status, outbox_core::JobStatus::Completed);
//! # Ok(()) }
//! ```

mod connect;
mod enqueue;
mod error;
mod job;
mod kind;
mod migration;
pub mod ops;
mod record;
mod storage;
mod wake;
mod worker;

pub use connect::{ConnectOpts, connect, connect_with};
pub use enqueue::{EnqueueOpts, Enqueued, enqueue, enqueue_batch, enqueue_batch_raw, enqueue_raw, transaction};
pub use error::{Error, Result, Violation};
pub use job::{Job, KindOpts};
pub use kind::{DEFAULT_MAX_PAYLOAD_BYTES, Kind, max_payload_bytes, set_max_payload_bytes};
pub use migration::{Migrator, migrate};
pub use outbox_macros::Job;
pub use record::{JobRecord, JobStatus};
pub use worker::{IntoOutput, JobContext, JobError, RetryPolicy, Worker, WorkerBuilder, WorkerHandle, shutdown_signal};
