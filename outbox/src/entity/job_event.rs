//! `outbox_job_events`, read-only: the event feed, a row per transition of one job, or one row for a worker's claim
//! or completion of many (`job_id` empty, the jobs listed in its `jobs` column, which this entity leaves out).
//! [`crate::ops::history`] reads one job's whole history and [`crate::ops::feed`] the feed in commit order.

use sea_orm::entity::prelude::*;

use super::Timestamp;

/// One transition of a job.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel, serde::Serialize)]
#[sea_orm(table_name = "outbox_job_events")]
pub struct Model {
    /// Its place in the feed.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The job (empty for a worker's row of many jobs).
    pub job_id: String,
    /// The job's kind.
    pub kind: String,
    /// The job's queue.
    pub queue: String,
    /// When it happened.
    pub at: Timestamp,
    /// What happened: `enqueued`, `claimed`, `completed`, `retried`, `failed`, ... ([`crate::JobEventKind`]).
    pub event: String,
    /// The attempt it concerns.
    pub attempt: i32,
    /// The worker that made it.
    pub worker: Option<String>,
    /// The error, for a failure.
    pub error: Option<String>,
}

/// The job an event is about.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// The job (absent once it is deleted, and for a worker's row of many jobs).
    #[sea_orm(belongs_to = "super::job::Entity", from = "Column::JobId", to = "super::job::Column::Id")]
    Job,
}

impl Related<super::job::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Job.def()
    }
}

#[async_trait::async_trait]
impl ActiveModelBehavior for ActiveModel {
    async fn before_save<C: ConnectionTrait>(self, _db: &C, _insert: bool) -> Result<Self, DbErr> {
        Err(super::read_only("outbox_job_events"))
    }

    async fn before_delete<C: ConnectionTrait>(self, _db: &C) -> Result<Self, DbErr> {
        Err(super::read_only("outbox_job_events"))
    }
}
