//! The worker's statements on SQLite, by name, for the catalogue of what the engine sends (`statements.sql`).

use super::{EXTEND, FEED_ROW, claim, complete, flow, rescue};

/// Every statement the worker's connection sends, by name, for the catalogue (`statements.sql`); connection
/// settings (`PRAGMA`) aside.
pub(in crate::storage::sqlite) fn statements() -> Vec<(&'static str, String)> {
    let claim_of = |one, queues| claim::claim_statement(one, queues);
    vec![
        ("claim: let in due scheduled jobs", claim::PROMOTE.into()),
        ("claim: the running jobs of a limited kind", claim::RUNNING.into()),
        ("claim: one kind from every queue", claim_of(true, false)),
        ("claim: several kinds from every queue", claim_of(false, false)),
        ("claim: kinds from some queues", claim_of(false, true)),
        ("claim: one kind from every queue, paused queues passed over", claim::claim_statement_except(true, false)),
        (
            "claim: several kinds from every queue, paused queues passed over",
            claim::claim_statement_except(false, false),
        ),
        ("claim: kinds from some queues, paused queues passed over", claim::claim_statement_except(false, true)),
        ("claim: rows a controlled kind's plan chose", claim::CLAIM_ROWS.into()),
        ("claim: fail a row that cannot be read", claim::FAIL_UNREADABLE.into()),
        ("flow: the pauses and holds in force", flow::PAUSES.into()),
        ("flow: a rate's buckets", flow::BUCKETS.into()),
        ("flow: a kind's fair shares", flow::FAIR.into()),
        ("flow: the keys with ready jobs", flow::READY_KEYS.into()),
        ("flow: whether a second key has pending jobs", flow::SECOND_KEY.into()),
        ("flow: a kind's next jobs", flow::CANDIDATES.into()),
        ("flow: a key's next jobs", flow::KEY_CANDIDATES.into()),
        ("flow: a kind's next jobs without a key", flow::KEYLESS_CANDIDATES.into()),
        ("flow: write back a bucket", flow::SAVE_BUCKET.into()),
        ("flow: write back a fair pass", flow::SAVE_PASS.into()),
        ("complete: a batch of outcomes", complete::FINISH_BATCH.into()),
        ("complete: a batch of plain completions", complete::FINISH_PLAIN.into()),
        ("complete: a batch of completions kept nowhere", complete::DISCARD_BATCH.into()),
        ("complete: a batch of completions into the archive", complete::ARCHIVE_BATCH.into()),
        ("complete: one completion", complete::COMPLETE_ONE.into()),
        ("complete: one retry", complete::RETRY_ONE.into()),
        ("complete: one failure", complete::FAIL_ONE.into()),
        ("complete: one snooze", complete::SNOOZE_ONE.into()),
        ("complete: one release", complete::RELEASE_ONE.into()),
        ("complete: one completion into the archive", complete::ARCHIVE_ONE.into()),
        ("complete: one completion kept nowhere", complete::DISCARD_ONE.into()),
        ("feed: a statement's row", FEED_ROW.into()),
        ("renew: leases", EXTEND.into()),
        ("rescue: let go stranded sequences", rescue::RELEASE_STRANDED.into()),
        ("rescue: expired claims", rescue::RESCUE.into()),
    ]
}
