//! One output row: every figure of a case on one backend at one durability setting, written as a JSON object
//! or as a line of the table.

use serde::Serialize;

/// One output line.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) case: &'static str,
    pub(crate) backend: &'static str,
    pub(crate) sync: &'static str,
    pub(crate) jobs: u64,
    pub(crate) jobs_per_sec: f64,
    /// Median seconds of one run (the `reconcile` case).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seconds: Option<f64>,
    pub(crate) baseline_jobs_per_sec: Option<f64>,
    pub(crate) ratio: Option<f64>,
    pub(crate) runs: usize,
    /// Whether jobs carry the payload-hash idempotency key (`unique = true`, the default).
    pub(crate) unique: bool,
    /// Jobs per transaction on the enqueue side; null for the process cases.
    pub(crate) jobs_per_txn: Option<u64>,
    /// Worker concurrency (and the baseline's claim size) in the process cases.
    pub(crate) concurrency: Option<usize>,
    pub(crate) baseline: Option<&'static str>,
    pub(crate) run_jobs_per_sec: Vec<f64>,
    pub(crate) baseline_run_jobs_per_sec: Vec<f64>,
    /// 1-minute load average when the case finished: other work on the machine (builds) skews fsync-bound
    /// FULL figures most.
    pub(crate) load_avg_1m: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rss_before_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peak_rss_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rss_after_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vm_hwm_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hwm_reset: Option<bool>,
    /// The `http` case: commit-to-client latency of the event stream (medians over the runs), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sse_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sse_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sse_max_ms: Option<f64>,
    /// The latency cases: commit returned to handler started (medians over the runs), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) start_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) start_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) start_max_ms: Option<f64>,
    /// The latency cases: jobs that waited 100 ms or more, over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) start_waited_100ms: Option<u64>,
    /// Case `latency_cross` on PostgreSQL: its floor, bare sqlx doing the same enqueues and claims (commit
    /// returned to claim returned, medians over the runs, ms), with the worker told in the enqueuing process,
    /// woken in another by `LISTEN` and claiming on a second connection, and claiming on the listening one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor_in_process_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor_in_process_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor_listen_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor_listen_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor_listen_and_claim_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor_listen_and_claim_p99_ms: Option<f64>,
    /// Case `stall`: an application enqueue on its own pool while a worker's runtime is stalled for 2 s (20
    /// stalls a run): its time (medians over the runs), ms, and how many of all took 100 ms or more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stall_enqueue_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stall_enqueue_max_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stall_enqueue_waited_100ms: Option<u64>,
    /// Case `idle_cpu`: an idle `outbox work`'s CPU time over a minute, % of one core (median over the runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idle_cpu_percent: Option<f64>,
    /// Case `dashboard`: the jobs page's first requests, start to last answer, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) jobs_page_ms: Option<f64>,
    /// Case `dashboard`: the overview's first requests, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) overview_ms: Option<f64>,
    /// Case `enqueue`: `enqueue_orm_ceiling` measured in the same runs, alternating with ours, and our ratio to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) orm_ceiling_jobs_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) orm_ceiling_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) orm_ceiling_run_jobs_per_sec: Option<Vec<f64>>,
    /// Case `million`: the median claim of 100 over 10,000 pending jobs, over 1,000,000, and over 1,000,000
    /// behind 100,000 future-dated and 100,000 unserved jobs of a higher priority, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) claim_10k_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) claim_1m_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) claim_1m_head_ms: Option<f64>,
    /// `claim_flow`: the plain claim over jobs that carry keys (the floor of a keyed claim's writes), jobs/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) keyed_plain_jobs_per_sec: Option<f64>,
    /// Case `million`: the worker's peak RSS draining 100,000 and 1,000,000 jobs, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peak_rss_100k_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peak_rss_1m_mb: Option<f64>,
    /// Case `million`: the database's size after the drain, and after deleting the completed jobs and
    /// vacuuming, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) db_mb_after_drain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) db_mb_after_vacuum: Option<f64>,
    /// The database's work per job (cases `process` and `held_snapshot`, medians over the runs): WAL bytes
    /// written while the jobs were enqueued, while they were drained, and in all (PostgreSQL; on SQLite the
    /// bytes this process wrote: WAL frames and checkpoints), rows written and commits (PostgreSQL), and the
    /// dead tuples left in the tables after the drain (PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wal_bytes_per_job_enqueue: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wal_bytes_per_job_drain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wal_bytes_per_job: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rows_per_job: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) commits_per_job: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dead_tuples: Option<i64>,
    /// Case `held_snapshot`: the same figures of the drain with no snapshot held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) baseline_wal_bytes_per_job_drain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) baseline_dead_tuples: Option<i64>,
    /// Case `retention`: finished jobs older than their age when the drain starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) old_jobs: Option<u64>,
    /// Case `retention`: how many of them were pruned by the time the drain ended (median).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pruned_during_drain: Option<u64>,
    /// Case `retention`: seconds from the worker's start until all were pruned (median).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prune_all_secs: Option<f64>,
}

pub(crate) fn table_header() -> String {
    format!(
        "{:<20} {:<8} {:<6} {:>7} {:>11} {:>11} {:>6}  notes",
        "case", "backend", "sync", "jobs", "jobs/s", "baseline/s", "ratio"
    )
}

pub(crate) fn table_line(row: &Row) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"));
    let mut notes = vec![if row.unique { "unique key" } else { "no key" }.to_owned()];
    if let Some(n) = row.jobs_per_txn {
        notes.push(format!("{n}/txn"));
    }
    if let Some(c) = row.concurrency {
        notes.push(format!("concurrency {c}"));
    }
    if let Some(secs) = row.seconds {
        notes.push(format!("{secs:.2} s"));
    }
    if let (Some(jobs), Some(overview)) = (row.jobs_page_ms, row.overview_ms) {
        notes.push(format!("jobs page {jobs:.1} ms, overview {overview:.1} ms"));
    }
    if let (Some(p50), Some(p99)) = (row.sse_p50_ms, row.sse_p99_ms) {
        notes.push(format!("stream p50 {p50:.2} ms, p99 {p99:.2} ms"));
    }
    if let (Some(p50), Some(p99), Some(max), Some(waited)) =
        (row.start_p50_ms, row.start_p99_ms, row.start_max_ms, row.start_waited_100ms)
    {
        notes.push(format!("start p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.1} ms, {waited} waited >= 100 ms"));
    }
    if let (Some(ceiling), Some(ratio)) = (row.orm_ceiling_jobs_per_sec, row.orm_ceiling_ratio) {
        notes.push(format!("ORM ceiling {ceiling:.0}/s, ratio {ratio:.2}"));
    }
    if let (Some(small), Some(big), Some(head)) = (row.claim_10k_ms, row.claim_1m_ms, row.claim_1m_head_ms) {
        notes.push(format!("claim 10k {small:.2} ms, 1M {big:.2} ms, 1M behind head {head:.2} ms"));
    }
    if let Some(keyed) = row.keyed_plain_jobs_per_sec {
        notes.push(format!("plain claim of keyed jobs {keyed:.0}/s, ratio to it {:.2}", row.jobs_per_sec / keyed));
    }
    if let (Some(small), Some(big)) = (row.peak_rss_100k_mb, row.peak_rss_1m_mb) {
        notes.push(format!("peak RSS 100k {small:.1} MiB, 1M {big:.1} MiB"));
    }
    if let (Some(drained), Some(vacuumed)) = (row.db_mb_after_drain, row.db_mb_after_vacuum) {
        notes.push(format!("db {drained:.0} MiB drained, {vacuumed:.0} MiB vacuumed"));
    }
    if let (Some(life), Some(drain)) = (row.wal_bytes_per_job, row.wal_bytes_per_job_drain) {
        notes.push(format!("WAL/job {life:.0} B (drain {drain:.0} B)"));
    }
    if let (Some(rows), Some(commits)) = (row.rows_per_job, row.commits_per_job) {
        notes.push(format!("rows/job {rows:.2}, commits/job {commits:.3}"));
    }
    if let Some(dead) = row.dead_tuples {
        notes.push(format!("{dead} dead tuples"));
    }
    if let Some(load) = row.load_avg_1m {
        notes.push(format!("load {load:.1}"));
    }
    if let (Some(before), Some(peak), Some(after), Some(hwm)) =
        (row.rss_before_mb, row.peak_rss_mb, row.rss_after_mb, row.vm_hwm_mb)
    {
        notes.push(format!("RSS {before:.1} -> peak {peak:.1} -> {after:.1} MiB, HWM {hwm:.1} MiB"));
    }
    format!(
        "{:<20} {:<8} {:<6} {:>7} {:>11.0} {:>11} {:>6}  {}",
        row.case,
        row.backend,
        row.sync,
        row.jobs,
        row.jobs_per_sec,
        opt(row.baseline_jobs_per_sec, 0),
        opt(row.ratio, 2),
        notes.join(", ")
    )
}
