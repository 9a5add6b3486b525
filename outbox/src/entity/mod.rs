//! The outbox's tables as read-only sea-orm entities, for an application's own queries and joins: "the failed jobs
//! of order 42", "orders whose confirmation has not run", the feed's rows of a job.
//!
//! Read them, join them, count them; write through the library ([`crate::enqueue`], [`crate::ops`]), which keeps
//! what the rows must agree on (sequences, keys, leases, the event feed). An active model of these entities refuses
//! to save or delete; `Entity::insert`, `update_many` and `delete_many` are not stopped, and must not be used.
//!
//! Times are [`Timestamp`]s, read from either backend's column type (SQLite stores integer milliseconds,
//! PostgreSQL `timestamptz`); compare a time column with [`at`], which binds a time the way the connection's
//! backend stores it.
//!
//! ```
//! # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), sea_orm::DbErr> {
//! use outbox::entity::job;
//! use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
//!
//! let failed = job::Entity::find()
//!     .filter(job::Column::Subject.eq("order:42"))
//!     .filter(job::Column::Status.eq("failed"))
//!     .order_by_desc(job::Column::Id)
//!     .all(db)
//!     .await?;
//! # let _ = failed; Ok(()) }
//! ```

pub mod job;
pub mod job_event;
mod timestamp;

pub use timestamp::{Timestamp, at};

/// What an active model of a read-only entity says when asked to write.
pub(crate) fn read_only(table: &str) -> sea_orm::DbErr {
    sea_orm::DbErr::Custom(format!(
        "`{table}` is read-only through its entity: write jobs through outbox (enqueue, ops), which keeps sequences, \
         keys, leases and the event feed in step"
    ))
}
