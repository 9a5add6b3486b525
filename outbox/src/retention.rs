//! Retention: finished jobs are deleted (with their history) once older than their status's age, in small
//! batches, by one process of the fleet at a time (a named lease in the database).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sea_orm::{DatabaseConnection, DatabaseTransaction};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::record::JobStatus;
use crate::storage::archive;
use crate::storage::retention::PruneRules;
use crate::storage::{self, Keep, now_ms};
use crate::time::ms_after;

const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3_600);

/// The lease's name in `outbox_locks`.
const LEASE: &str = "retention";

/// How long finished jobs are kept, and how the pruning runs. Workers prune with [`Retention::default`]
/// unless given another (or [`Retention::off`]) through [`crate::WorkerBuilder::retention`].
///
/// Kept whatever their age: a failed or cancelled job that holds its sequence (until an operator acts), and
/// the latest completed job of each sequence key, which the reconcilers read as the evidence of what the
/// path or resource should be. [`crate::ops::purge`] stays for pruning by hand.
///
/// A kind may keep nothing instead ([`Retention::kind_keep_nothing`]): its jobs are deleted as they complete.
/// Events outlive the jobs they tell of, so the event feed (and `Last-Event-ID`) never skips one; the pass
/// prunes them once they are as old as the shortest age above.
#[derive(Debug, Clone)]
pub struct Retention {
    ages: BTreeMap<JobStatus, Option<Duration>>,
    kinds: BTreeMap<(String, JobStatus), Option<Duration>>,
    keep_nothing: BTreeSet<String>,
    partitioned: BTreeSet<String>,
    span: Duration,
    interval: Duration,
    batch: u64,
    enabled: bool,
}

impl Default for Retention {
    /// Completed jobs for a day, failed and cancelled ones for seven; a pass every minute, 500 jobs a batch.
    fn default() -> Self {
        let ages = BTreeMap::from([
            (JobStatus::Completed, Some(DAY)),
            (JobStatus::Failed, Some(7 * DAY)),
            (JobStatus::Cancelled, Some(7 * DAY)),
        ]);
        Retention {
            ages,
            kinds: BTreeMap::new(),
            keep_nothing: BTreeSet::new(),
            partitioned: BTreeSet::new(),
            span: HOUR,
            interval: Duration::from_secs(60),
            batch: 500,
            enabled: true,
        }
    }
}

impl Retention {
    /// The defaults: see [`Retention::default`].
    pub fn new() -> Self {
        Retention::default()
    }

    /// No pruning by this worker.
    pub fn off() -> Self {
        Retention { enabled: false, ..Retention::default() }
    }

    /// Keeps finished jobs of `status` for `age` (`None`: forever). Statuses that are not finished are
    /// refused when the worker is built.
    pub fn max_age(mut self, status: JobStatus, age: Option<Duration>) -> Self {
        self.ages.insert(status, age);
        self
    }

    /// Keeps finished jobs of `kind` and `status` for `age` (`None`: forever), in place of the status's age.
    pub fn kind_max_age(mut self, kind: impl Into<String>, status: JobStatus, age: Option<Duration>) -> Self {
        self.kinds.insert((kind.into(), status), age);
        self
    }

    /// Keeps nothing of `kind`'s completed jobs: a worker built with this retention deletes each one in the
    /// statement that completes it, so the table never holds them and no pass has to delete them. What stays:
    /// the job's events in the feed (its `enqueued`, `claimed` and `completed`, read by `Last-Event-ID` readers
    /// and the server's metrics) until they are as old as the shortest age. What goes: its row, output and
    /// history ([`crate::ops::get`] then finds no such job, and [`crate::ops::wait`] says it completed unkept).
    ///
    /// Still kept, by their ages: failed and cancelled jobs of the kind, jobs with a sequence key (the latest
    /// completed one of a key is the reconcilers' evidence), and jobs another process completes (a remote
    /// worker, or a worker built without this retention). Refused when the worker is built: a kind it has no
    /// handler for, and a kind that declares a sequence (all its jobs would be kept). It applies even where the
    /// worker prunes nothing ([`Retention::off`]).
    pub fn kind_keep_nothing(mut self, kind: impl Into<String>) -> Self {
        self.keep_nothing.insert(kind.into());
        self
    }

    /// Keeps `kind`'s completed jobs in time partitions: a worker built with this retention moves each one, in
    /// the statement that completes it, out of the table claims read into an archive partitioned by time of
    /// completion, and the retention pass drops a whole partition once all of it is older than the completed
    /// jobs' age ([`Retention::max_age`] of [`JobStatus::Completed`], a day by default; `None` keeps them).
    /// Pruning deletes no rows and the jobs table holds only what is pending, running or failed, whatever the
    /// throughput; a job stays up to about one [`Retention::partition_span`] (and a pass's interval) past its age.
    ///
    /// What stays readable until then: the job itself ([`crate::ops::get`], [`crate::ops::wait`] with its output,
    /// listings and counts), and its events for as long as the feed keeps them (the shortest age, the same
    /// cutoff as for any job's feed rows). Kept in the jobs table as usual: failed and cancelled jobs of the
    /// kind, jobs with a sequence key, and jobs another process completes. Refused when the worker is built: a
    /// kind it has no handler for, one that declares a sequence, one that also keeps nothing, and one given its
    /// own age for completed jobs ([`Retention::kind_max_age`]). It applies even where the worker prunes
    /// nothing ([`Retention::off`]); then another process's pass drops the partitions.
    pub fn kind_in_partitions(mut self, kind: impl Into<String>) -> Self {
        self.partitioned.insert(kind.into());
        self
    }

    /// How much time of completions one partition of the archive holds (default an hour, at least 10 ms): the
    /// pass drops a partition when its last moment is older than the completed jobs' age. On PostgreSQL
    /// partitions are made three spans ahead; on SQLite the archive table is set aside as a partition once per
    /// span. Processes of one fleet should agree on it; a partition already made keeps its bounds.
    pub fn partition_span(mut self, span: Duration) -> Self {
        self.span = span.max(Duration::from_millis(10));
        self
    }

    /// The kinds kept in time partitions.
    pub(crate) fn kinds_in_partitions(&self) -> impl Iterator<Item = &String> {
        self.partitioned.iter()
    }

    /// Where a completed job of `kind` without a sequence key goes as it completes.
    pub(crate) fn keep(&self, kind: &str) -> Keep {
        if self.keep_nothing.contains(kind) {
            Keep::Nothing
        } else if self.partitioned.contains(kind) {
            Keep::Archive
        } else {
            Keep::Row
        }
    }

    /// The kinds that keep nothing.
    pub(crate) fn kinds_keeping_nothing(&self) -> impl Iterator<Item = &String> {
        self.keep_nothing.iter()
    }

    /// How often a pass runs (default 60 s).
    pub fn interval(mut self, d: Duration) -> Self {
        self.interval = d.max(Duration::from_millis(10));
        self
    }

    /// Jobs deleted per statement (default 500); each batch holds the write lock briefly and the pass pauses
    /// between batches so workers keep their pace.
    pub fn batch_size(mut self, n: u64) -> Self {
        self.batch = n.max(1);
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        let statuses = self.ages.keys().copied().chain(self.kinds.keys().map(|(_, s)| *s));
        if let Some(bad) = statuses.into_iter().find(|s| !s.is_terminal()) {
            return Err(Error::Invalid(format!(
                "retention applies to finished jobs (completed, failed, cancelled); `{bad}` jobs are never pruned"
            )));
        }
        if let Some(kind) = self.partitioned.intersection(&self.keep_nothing).next() {
            return Err(Error::Invalid(format!(
                "retention names kind `{kind}` both to keep nothing and to keep in time partitions; choose one"
            )));
        }
        if let Some((kind, _)) =
            self.kinds.keys().find(|(kind, status)| *status == JobStatus::Completed && self.partitioned.contains(kind))
        {
            return Err(Error::Invalid(format!(
                "retention gives kind `{kind}` its own age for completed jobs, but keeps them in time partitions, \
                 which go by the completed jobs' age of all kinds (`Retention::max_age`)"
            )));
        }
        Ok(())
    }

    /// The rules of a pass at `now`.
    fn rules(&self, now: i64) -> PruneRules {
        let cutoff = |age: Option<Duration>| age.map_or(0, |a| before(now, a).max(0));
        let statuses = self
            .ages
            .iter()
            .map(|(status, age)| {
                let kinds: Vec<(String, i64)> = self
                    .kinds
                    .iter()
                    .filter(|((_, s), _)| s == status)
                    .map(|((kind, _), age)| (kind.clone(), cutoff(*age)))
                    .collect();
                (*status, cutoff(*age), kinds)
            })
            .collect();
        PruneRules { statuses }
    }

    /// Feed rows go by the shortest age of all.
    fn feed_cutoff(&self, now: i64) -> Option<i64> {
        let shortest = self.ages.values().chain(self.kinds.values()).flatten().min()?;
        Some(before(now, *shortest))
    }
}

/// Prunes until `stop`, a pass every interval while this worker holds the fleet's retention lease.
pub(crate) async fn run(db: DatabaseConnection, retention: Retention, worker: String, stop: CancellationToken) {
    if !retention.enabled {
        return;
    }
    loop {
        match pass(&db, &retention, &worker, &stop).await {
            Ok((0, 0)) => {}
            Ok((jobs, feed_rows)) => tracing::info!(worker, jobs, feed_rows, "retention pruned finished jobs"),
            Err(e) => tracing::warn!(worker, error = %e, "retention pass failed; trying again next interval"),
        }
        match upkeep(&db, &retention, &worker).await {
            Ok(done) if done == archive::Done::default() => {}
            Ok(done) => tracing::info!(
                worker,
                made = done.made,
                dropped = done.dropped,
                default_partition_jobs = done.pruned,
                "retention kept the archive's partitions"
            ),
            Err(e) => tracing::warn!(worker, error = %e, "archive upkeep failed; trying again next interval"),
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(retention.interval) => {}
        }
    }
    let conn = &db;
    let released: Result<()> = storage::locks::release(conn, LEASE, &worker).await;
    if let Err(e) = released {
        tracing::debug!(worker, error = %e, "giving up the retention lease failed; it expires on its own");
    }
}

/// A write transaction holding the retention lease at `now` (taken or renewed in it), or `None` when another
/// process holds it. A worker without the lease finds that out by reading, never waiting for the write lock.
async fn leased_write(
    db: &DatabaseConnection,
    retention: &Retention,
    worker: &str,
    now: i64,
) -> Result<Option<DatabaseTransaction>> {
    if storage::locks::held_by_other(db, LEASE, worker, now).await? {
        return Ok(None);
    }
    let txn = storage::begin_write(db).await?;
    let lease_until = ms_after(now, retention.interval * 2 + Duration::from_secs(60));
    Ok(storage::locks::take(&txn, LEASE, worker, now, lease_until).await?.then_some(txn))
}

/// The time `age` before `now`, in milliseconds: finished jobs last changed before it are due.
fn before(now: i64, age: Duration) -> i64 {
    now.saturating_sub(ms_after(0, age))
}

/// Makes and drops the archive's partitions (`storage/archive.rs`) in one transaction that holds the lease;
/// nothing while no kind is kept in partitions here and the archive is empty.
async fn upkeep(db: &DatabaseConnection, retention: &Retention, worker: &str) -> Result<archive::Done> {
    let now = now_ms();
    if retention.partitioned.is_empty() && !archive::in_use(db).await? {
        return Ok(archive::Done::default());
    }
    let Some(txn) = leased_write(db, retention, worker, now).await? else {
        return Ok(archive::Done::default());
    };
    let age = retention.ages.get(&JobStatus::Completed).copied().flatten();
    let plan = archive::Upkeep {
        span: i64::try_from(retention.span.as_millis()).unwrap_or(i64::MAX),
        cutoff: age.map(|a| before(now, a)),
        ahead: !retention.partitioned.is_empty(),
        batch: retention.batch,
    };
    let done = archive::upkeep(&txn, &plan, now).await?;
    txn.commit().await.map_err(Error::db("committing the archive's upkeep"))?;
    Ok(done)
}

/// One pass: batches until none is full. Each batch renews the lease in its own transaction, so a process
/// that dies mid-pass lets another take over after two intervals.
async fn pass(
    db: &DatabaseConnection,
    retention: &Retention,
    worker: &str,
    stop: &CancellationToken,
) -> Result<(u64, u64)> {
    let (mut jobs, mut feed_rows) = (0, 0);
    let mut feed_done = false;
    loop {
        let started = std::time::Instant::now();
        let now = now_ms();
        let Some(txn) = leased_write(db, retention, worker, now).await? else {
            return Ok((jobs, feed_rows));
        };
        let pruned = storage::retention::prune(&txn, &retention.rules(now), now, retention.batch).await?;
        let feed = match retention.feed_cutoff(now) {
            Some(before) if !feed_done => storage::retention::prune_feed(&txn, before, retention.batch).await?,
            _ => 0,
        };
        txn.commit().await.map_err(Error::db("committing a retention batch"))?;
        jobs += pruned.jobs;
        feed_rows += feed;
        feed_done |= feed < retention.batch;
        if !pruned.more && feed_done {
            return Ok((jobs, feed_rows));
        }
        // The write lock was held for `started.elapsed()`; leave the database to the workers three times
        // as long before the next batch.
        let pause = (started.elapsed() * 3).max(Duration::from_millis(5));
        tokio::select! {
            _ = stop.cancelled() => return Ok((jobs, feed_rows)),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sea_orm::ConnectionTrait;
    use tokio_util::sync::CancellationToken;

    use super::{LEASE, Retention, pass};
    use crate::ConnectOpts;
    use crate::storage::{self, now_ms};
    use crate::time::ms_after;

    /// A worker that does not hold the retention lease finds that out by reading: it never waits for the
    /// write lock, which another process's writer holds here for the whole pass.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pass_of_a_worker_without_the_lease_takes_no_write_lock() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("outbox.db").display());
        // A busy handler that waits a minute: taking the write lock would hang the test, not fail it quietly.
        let opts = ConnectOpts { busy_timeout: Duration::from_secs(60), ..ConnectOpts::default() };
        let db = crate::connect_with(&url, opts).await.expect("connect");
        crate::migrate(&db).await.expect("migrate");
        let now = now_ms();
        assert!(
            storage::locks::take(&db, LEASE, "other", now, ms_after(now, Duration::from_secs(600)))
                .await
                .expect("take")
        );
        let writer = crate::connect(&url).await.expect("connect the other writer");
        let held = storage::begin_write(&writer).await.expect("the other writer's lock");
        held.execute_unprepared("UPDATE outbox_locks SET holder = holder").await.expect("write under the lock");
        let passed = tokio::time::timeout(
            Duration::from_secs(30),
            pass(&db, &Retention::default(), "me", &CancellationToken::new()),
        )
        .await
        .expect("the pass waited for the write lock");
        assert_eq!(passed.expect("pass"), (0, 0));
        held.rollback().await.expect("rollback");
    }
}
