//! The worker's statements on PostgreSQL, by name, for the catalogue of what the engine sends (`statements.sql`).

use super::super::wake::{NOTIFY, SWEEP, SWEEP_KEYS_LOCK};
use super::{EXTEND, EXTEND_ONE, claim, complete, flow, rescue};

/// Every statement the worker's connections send, by name, for the catalogue (`statements.sql`); `LISTEN` aside.
pub(in crate::storage::postgres) fn statements() -> Vec<(&'static str, String)> {
    vec![
        ("claim: let in due scheduled jobs", claim::PROMOTE.into()),
        ("claim: the queues with ready jobs", claim::QUEUES.into()),
        ("claim: the lock of a limited kind", claim::LIMIT_LOCK.into()),
        ("claim: the running jobs of a limited kind", claim::RUNNING.into()),
        ("claim: kinds from every queue", claim::CLAIM_ONE.into()),
        ("claim: kinds from every queue, after the last claim's end", claim::CLAIM_ONE_AFTER.into()),
        ("claim: kinds from some queues", claim::CLAIM_QUEUES.into()),
        ("claim: kinds from some queues, after the last claim's end", claim::CLAIM_QUEUES_AFTER.into()),
        ("flow: the pauses and holds in force", flow::PAUSES.into()),
        ("flow: a controlled kind's state", flow::STATE.into()),
        ("flow: a kind's next jobs", flow::CANDIDATES.into()),
        ("flow: each key's next jobs", flow::KEY_CANDIDATES.into()),
        (
            "claim: jobs a controlled kind's plan chose, its buckets and passes written back",
            claim::CLAIM_IDS_SAVING.clone(),
        ),
        ("complete: a batch of outcomes", complete::FINISH.into()),
        ("complete: a batch of plain completions", complete::FINISH_PLAIN.into()),
        ("complete: a batch of completions kept nowhere or archived", complete::FINISH_DISCARDING.into()),
        ("complete: one outcome", complete::FINISH_ONE.into()),
        ("renew: leases", EXTEND.into()),
        ("renew: one lease", EXTEND_ONE.into()),
        ("rescue: the sequences to let go, locked", rescue::SWEEP_LOCK.into()),
        ("rescue: let go locked sequences", SWEEP.into()),
        ("rescue: expired claims", rescue::RESCUE.into()),
        ("listener: lock sequences enqueued onto under a snapshot", SWEEP_KEYS_LOCK.into()),
        ("wake: the workers of a schema", NOTIFY.into()),
    ]
}
