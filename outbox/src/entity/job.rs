//! `outbox_jobs`, read-only: one row per job not yet deleted by retention (completed jobs of kinds that archive
//! move to `outbox_jobs_archive`, which keeps no subject).

use sea_orm::entity::prelude::*;

use super::Timestamp;

/// A job as stored. The columns an application reads; the claim's bookkeeping columns are left out.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel, serde::Serialize)]
#[sea_orm(table_name = "outbox_jobs")]
pub struct Model {
    /// Time-ordered id (a ULID).
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Kind name.
    pub kind: String,
    /// Queue name.
    pub queue: String,
    /// The payload.
    pub payload: Json,
    /// `pending`, `claimed`, `completed`, `failed` or `cancelled` ([`crate::JobStatus`]).
    pub status: String,
    /// Higher runs first.
    pub priority: i32,
    /// Attempts used so far.
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Earliest time it may be claimed.
    pub run_at: Timestamp,
    /// The worker holding (or that last held) its claim.
    pub locked_by: Option<String>,
    /// The error of its latest failed attempt.
    pub last_error: Option<String>,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
    /// What its handler returned on success.
    pub output: Option<Json>,
    /// The domain row it is about (`order:42`).
    pub subject: Option<String>,
    /// The sequence it runs in.
    pub sequence_key: Option<String>,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When it was last claimed.
    pub claimed_at: Option<Timestamp>,
    /// When it completed.
    pub completed_at: Option<Timestamp>,
    /// When the row last changed.
    pub updated_at: Timestamp,
}

/// A job's own rows of the event feed.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// The event rows that name the job (its enqueue on SQLite, operators' actions, rescues, ...). A worker's claims
    /// and completions are rows of their own that list many jobs (`job_id` empty): [`crate::ops::history`] reads a
    /// job's whole history.
    #[sea_orm(has_many = "super::job_event::Entity")]
    Events,
}

impl Related<super::job_event::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Events.def()
    }
}

#[async_trait::async_trait]
impl ActiveModelBehavior for ActiveModel {
    async fn before_save<C: ConnectionTrait>(self, _db: &C, _insert: bool) -> Result<Self, DbErr> {
        Err(super::read_only("outbox_jobs"))
    }

    async fn before_delete<C: ConnectionTrait>(self, _db: &C) -> Result<Self, DbErr> {
        Err(super::read_only("outbox_jobs"))
    }
}
