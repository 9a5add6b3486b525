#![doc = include_str!("../docs/crate.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod connect;
mod enqueue;
pub mod entity;
mod error;
pub mod flow;
mod id;
mod job;
mod kind;
mod migration;
pub mod ops;
mod periodic;
mod record;
/// The remote-worker protocol `outbox-server` speaks for workers outside the process. For the sibling
/// crates: not part of the public API, and not covered by semver.
#[doc(hidden)]
pub mod remote;
mod retention;
/// Paged scans of completed jobs for the reconcilers of `outbox-fs` and `outbox-aws`. For the sibling crates:
/// not part of the public API, and not covered by semver.
#[doc(hidden)]
pub mod scan;
mod stats;
mod storage;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod time;
pub mod trace;
mod transaction;
mod wake;
mod worker;
mod workflow;

pub use connect::{ConnectOpts, connect, connect_with};
pub use enqueue::{EnqueueOpts, Enqueued, enqueue, enqueue_batch, enqueue_batch_raw, enqueue_raw};
pub use error::{Error, Result};
pub use id::new_job_id;
pub use job::{Job, KindOpts, SequenceFailure, Violation};
pub use kind::{DEFAULT_MAX_PAYLOAD_BYTES, Kind, MAX_KEY_BYTES, MAX_NAME_BYTES, MAX_SUBJECT_BYTES};
pub use migration::{Migrator, migrate, pending_migrations};
pub use ops::check_subject;
pub use outbox_macros::Job;
pub use periodic::{MissedTicks, Schedule};
pub use record::{
    FeedEvent, JobEvent, JobEventKind, JobFilter, JobRecord, JobStatus, KindRecord, ReconciliationRecord,
    ScheduleRecord, WorkerRecord,
};
pub use retention::Retention;
pub use transaction::{begin, transaction};
pub use wake::Watch;
pub use worker::{IntoOutput, JobContext, JobError, RetryPolicy, Worker, WorkerBuilder, WorkerHandle, shutdown_signal};
pub use workflow::{
    Batch, BatchSummary, EnqueuedWorkflow, Links, Parent, ParentFailure, Parents, Step, StepState, Workflow,
    WorkflowGraph, WorkflowStep, enqueue_workflow,
};

/// The crates a job kind and its caller need, at the versions outbox uses: one `outbox` dependency (plus
/// `serde` for its derives) is enough, and a version mismatch cannot show up as trait errors far from the cause.
pub use chrono;
pub use schemars;
pub use sea_orm;
pub use serde_json;

/// What most code that defines, enqueues and works jobs uses: `use outbox::prelude::*;`.
///
/// It also brings `schemars` into scope, so `#[derive(JsonSchema)]` works without a `schemars` dependency.
///
/// ```
/// use outbox::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Job, Serialize, Deserialize, JsonSchema)]
/// #[job(kind = "send_welcome")]
/// struct SendWelcome {
///     user_id: i64,
/// }
/// # assert_eq!(<SendWelcome as Job>::KIND, "send_welcome");
/// ```
pub mod prelude {
    pub use crate::schemars::{self, JsonSchema};
    pub use crate::sea_orm::{self, ConnectionTrait, DatabaseConnection, DatabaseTransaction};
    pub use crate::{EnqueueOpts, Enqueued, Job, JobContext, JobError, Worker};
}
