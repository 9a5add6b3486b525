//! The cases the benchmark runs: their names, the durability settings each runs at, how many jobs it runs
//! and what it is compared with.

use crate::engine::{Backend, SyncMode};
use crate::{million, raw_pg, stall};

/// Jobs per transaction in `enqueue_batch`.
pub(crate) const BATCH: u64 = 1_000;
/// Jobs timed per run of the latency cases, whatever `--jobs` says.
const LATENCY_JOBS: u64 = 1_000;
/// Old finished jobs per new job in the `retention` case (1,000,000 beside the default 20,000).
pub(crate) const RETENTION_OLD_PER_JOB: u64 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    Enqueue,
    EnqueueOrmCeiling,
    EnqueueBatch,
    Process,
    ProcessMemory,
    ProcessSequenced,
    ProcessSequenced100,
    ClaimSequenced,
    ClaimFlow,
    ProcessFair,
    Reconcile,
    Http,
    Dashboard,
    Retention,
    RetentionPartitioned,
    Latency,
    LatencyLoaded,
    Million,
    Stall,
    HeldSnapshot,
    LatencyCross,
    IdleCpu,
    ClaimWorkflow,
    LatencyWorkflow,
}

pub(crate) const CASES: [Case; 24] = [
    Case::Enqueue,
    Case::EnqueueOrmCeiling,
    Case::EnqueueBatch,
    Case::Process,
    Case::ProcessMemory,
    Case::ProcessSequenced,
    Case::ProcessSequenced100,
    Case::ClaimSequenced,
    Case::ClaimFlow,
    Case::ProcessFair,
    Case::Reconcile,
    Case::Http,
    Case::Dashboard,
    Case::Retention,
    Case::RetentionPartitioned,
    Case::Latency,
    Case::LatencyLoaded,
    Case::Million,
    Case::Stall,
    Case::HeldSnapshot,
    Case::LatencyCross,
    Case::IdleCpu,
    Case::ClaimWorkflow,
    Case::LatencyWorkflow,
];

/// `--case` takes a case by its row name.
impl clap::ValueEnum for Case {
    fn value_variants<'a>() -> &'a [Case] {
        &CASES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// Sequences in `process_sequenced_100`.
pub(crate) const FEW_KEYS: u64 = 100;

impl Case {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Case::Enqueue => "enqueue",
            Case::EnqueueOrmCeiling => "enqueue_orm_ceiling",
            Case::EnqueueBatch => "enqueue_batch",
            Case::Process => "process",
            Case::ProcessMemory => "process_memory",
            Case::ProcessSequenced => "process_sequenced",
            Case::ProcessSequenced100 => "process_sequenced_100",
            Case::ClaimSequenced => "claim_sequenced",
            Case::ClaimFlow => "claim_flow",
            Case::ProcessFair => "process_fair",
            Case::Reconcile => "reconcile",
            Case::Http => "http",
            Case::Dashboard => "dashboard",
            Case::Retention => "retention",
            Case::RetentionPartitioned => "retention_partitioned",
            Case::Latency => "latency",
            Case::LatencyLoaded => "latency_loaded",
            Case::Million => "million",
            Case::Stall => "stall",
            Case::HeldSnapshot => "held_snapshot",
            Case::LatencyCross => "latency_cross",
            Case::IdleCpu => "idle_cpu",
            Case::ClaimWorkflow => "claim_workflow",
            Case::LatencyWorkflow => "latency_workflow",
        }
    }

    pub(crate) fn syncs(self) -> &'static [SyncMode] {
        match self {
            Case::EnqueueOrmCeiling => &[SyncMode::Normal],
            Case::ProcessMemory
            | Case::Reconcile
            | Case::ClaimSequenced
            | Case::ClaimFlow
            | Case::Dashboard
            | Case::Retention
            | Case::RetentionPartitioned
            | Case::Million
            | Case::Stall
            | Case::HeldSnapshot
            | Case::IdleCpu
            | Case::ClaimWorkflow => &[SyncMode::Full],
            _ => &[SyncMode::Full, SyncMode::Normal],
        }
    }

    /// Jobs per run, scaled from `--jobs`.
    pub(crate) fn jobs(self, sync: SyncMode, base: u64) -> u64 {
        let n = match (self, sync) {
            (Case::Enqueue | Case::EnqueueOrmCeiling | Case::Http, SyncMode::Full) => base / 10,
            (Case::Enqueue | Case::EnqueueOrmCeiling | Case::Http, SyncMode::Normal) => base / 4,
            (
                Case::EnqueueBatch
                | Case::Process
                | Case::ProcessSequenced
                | Case::ProcessSequenced100
                | Case::ProcessFair,
                _,
            ) => base,
            (Case::Retention | Case::RetentionPartitioned, _) => base,
            (Case::Latency | Case::LatencyLoaded | Case::LatencyCross | Case::LatencyWorkflow, _) => LATENCY_JOBS,
            (Case::ClaimWorkflow, _) => base,
            (Case::IdleCpu, _) => 1,
            (Case::Million, _) => million::BIG,
            (Case::Stall, _) => stall::ROUNDS,
            (
                Case::ProcessMemory
                | Case::Reconcile
                | Case::ClaimSequenced
                | Case::ClaimFlow
                | Case::Dashboard
                | Case::HeldSnapshot,
                _,
            ) => base * 5,
        };
        n.max(1)
    }

    /// Whether the case's jobs carry the default payload-hash idempotency key.
    pub(crate) fn unique(self) -> bool {
        matches!(self, Case::Enqueue | Case::EnqueueOrmCeiling | Case::EnqueueBatch | Case::Reconcile | Case::Http)
    }

    /// Whether the case runs on `backend`: a held snapshot is a PostgreSQL matter (SQLite readers hold back
    /// only checkpoints, never the reuse of a row's space).
    pub(crate) fn runs_on(self, backend: Backend) -> bool {
        self != Case::HeldSnapshot || backend == Backend::Postgres
    }

    pub(crate) fn baseline(self, backend: Backend) -> Option<&'static str> {
        match (backend, self) {
            (Backend::Sqlite, Case::Enqueue | Case::EnqueueOrmCeiling) => {
                Some("rusqlite: BEGIN IMMEDIATE; INSERT order; INSERT job ON CONFLICT DO NOTHING; COMMIT")
            }
            (Backend::Sqlite, Case::EnqueueBatch) => {
                Some("rusqlite: one transaction per 1000 jobs, multi-row INSERT, row count checked")
            }
            (Backend::Sqlite, Case::Process) => {
                Some("rusqlite: claim UPDATE ... RETURNING LIMIT 100, then 100 fenced UPDATEs in one transaction")
            }
            (Backend::Postgres, Case::Enqueue | Case::EnqueueOrmCeiling) => {
                Some("sqlx-postgres: BEGIN; INSERT order; INSERT job ON CONFLICT DO NOTHING; COMMIT")
            }
            (Backend::Postgres, Case::EnqueueBatch) => Some(
                "sqlx-postgres: one transaction per 1000 jobs, one INSERT from json_to_recordset, row count checked",
            ),
            (Backend::Postgres, Case::Process) => Some(raw_pg::PROCESS),
            (_, Case::ProcessSequenced | Case::ProcessSequenced100 | Case::ProcessFair) => {
                Some("outbox process: as many unsequenced jobs, same worker, same run")
            }
            (_, Case::ClaimSequenced) => Some("the same claim of 100 over as many unsequenced pending jobs"),
            (_, Case::ClaimWorkflow) => {
                Some("the same claim of 100 over as many ready jobs without the 100,000 waiting steps, same run")
            }
            (_, Case::ClaimFlow) => {
                Some("the worker's claim of 100 over as many pending jobs of a kind without flow control, same run")
            }
            (
                _,
                Case::ProcessMemory
                | Case::Reconcile
                | Case::Dashboard
                | Case::Latency
                | Case::LatencyLoaded
                | Case::LatencyCross
                | Case::LatencyWorkflow
                | Case::IdleCpu
                | Case::Stall,
            ) => None,
            (_, Case::Million) => Some("the same worker draining 20,000 jobs, same run"),
            (_, Case::HeldSnapshot) => Some("the same drain with no snapshot held, runs alternating"),
            (_, Case::Retention | Case::RetentionPartitioned) => {
                Some("the same drain beside the same old finished jobs, retention off")
            }
            (_, Case::Http) => Some("outbox enqueue in process: 16 tasks on the pool, one job per statement"),
        }
    }
}
