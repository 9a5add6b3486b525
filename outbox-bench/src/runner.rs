//! The runner: one case on one backend at one durability setting, run `--runs` times with its baseline
//! alternating, and summarized into a row.

use std::collections::HashMap;

use crate::case::{BATCH, Case, FEW_KEYS, RETENTION_OLD_PER_JOB};
use crate::engine::{Backend, SyncMode};
use crate::memory::Memory;
use crate::row::Row;
use crate::scratch::{Location, Target};
use crate::stats::{Measure, median, round};
use crate::{
    BoxError, CONCURRENCY, dashboard, flow, http, idle_cpu, latency, million, raw_pg, retention, stall, subject, work,
};

/// Runs one case on one backend at one sync setting `runs` times, outbox and baseline alternating, and
/// summarizes it.
pub(crate) struct Runner {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) runs: usize,
    pub(crate) base_jobs: u64,
    /// Worker concurrency in the process cases (`--concurrency`).
    pub(crate) concurrency: usize,
    /// The PostgreSQL server the `postgres` rows run on.
    pub(crate) pg_url: Option<String>,
    /// Baseline runs already measured, by (baseline, backend, sync, jobs): the ORM ceiling shares `enqueue`'s.
    pub(crate) baselines: HashMap<(&'static str, &'static str, SyncMode, u64), Vec<f64>>,
}

impl Runner {
    /// The worker concurrency (and baseline claim size) `case` runs at: `--concurrency` in the cases it sizes,
    /// [`CONCURRENCY`] in the others (`process_memory`'s child, the claims of `claim_sequenced` and `million`,
    /// `retention`).
    pub(crate) fn concurrency_for(&self, case: Case) -> usize {
        match case {
            Case::Process
            | Case::ProcessSequenced
            | Case::ProcessSequenced100
            | Case::ProcessFair
            | Case::HeldSnapshot => self.concurrency,
            _ => CONCURRENCY,
        }
    }

    fn target(&self, backend: Backend, sync: SyncMode) -> Result<Target, BoxError> {
        Ok(match backend {
            Backend::Sqlite => Target::Sqlite(sync),
            Backend::Postgres => {
                let server = self.pg_url.clone().ok_or("the postgres rows need a server: --pg-url URL")?;
                Target::Postgres { server, sync }
            }
        })
    }

    /// One run of a `latency_cross` floor on a fresh schema (see [`raw_pg::latency_floor`]).
    fn floor_run(&self, target: &Target, n: u64, wake: raw_pg::Wake) -> Result<latency::Latency, BoxError> {
        let prepared = self.rt.block_on(subject::empty(target))?;
        let Location::Url(url) = &prepared.location else {
            return Err("the latency floor runs on PostgreSQL".into());
        };
        let l = self.rt.block_on(raw_pg::latency_floor(url, &subject::noop_kind()?, n, wake));
        self.rt.block_on(prepared.remove())?;
        l
    }

    pub(crate) fn run(&mut self, case: Case, backend: Backend, sync: SyncMode) -> Result<Row, BoxError> {
        let target = self.target(backend, sync)?;
        let n = case.jobs(sync, self.base_jobs);
        let baseline = case.baseline(backend);
        let cached = baseline.and_then(|b| self.baselines.get(&(b, backend.name(), sync, n)).cloned());
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        let mut keyed = Vec::new();
        let mut memory = Vec::new();
        let mut latencies = Vec::new();
        let mut starts = Vec::new();
        let mut stalls = Vec::new();
        let mut pages = Vec::new();
        let mut pruned = Vec::new();
        let mut scales = Vec::new();
        let mut idle = Vec::new();
        let mut ceilings = Vec::new();
        let mut works: Vec<work::Work> = Vec::new();
        let mut free_works: Vec<work::Work> = Vec::new();
        let mut floors: Vec<(raw_pg::Wake, Vec<latency::Latency>)> =
            [raw_pg::Wake::InProcess, raw_pg::Wake::Listen, raw_pg::Wake::ListenAndClaim]
                .into_iter()
                .map(|w| (w, Vec::new()))
                .collect();
        for run in 1..=self.runs {
            let (name, label, runs) = (case.name(), sync.label(backend), self.runs);
            eprintln!("{name} {} {label} run {run}/{runs} ({n} jobs)", backend.name());
            let measure = match case {
                Case::Enqueue => {
                    // The ORM ceiling alternates with it run by run, so their ratio sees the same machine.
                    let ours = self.rt.block_on(subject::enqueue(&target, n))?;
                    ceilings.push(self.rt.block_on(subject::enqueue_orm_ceiling(&target, n))?.jobs_per_sec());
                    ours
                }
                Case::EnqueueOrmCeiling => self.rt.block_on(subject::enqueue_orm_ceiling(&target, n))?,
                Case::EnqueueBatch => self.rt.block_on(subject::enqueue_batch(&target, n, BATCH))?,
                Case::Process => {
                    let (measure, w) = self.rt.block_on(subject::process(&target, n, self.concurrency_for(case)))?;
                    works.push(w);
                    measure
                }
                Case::HeldSnapshot => {
                    // The free drain alternates with the held one, run by run, on the same server.
                    let (held, w) =
                        self.rt.block_on(subject::held_snapshot(&target, n, self.concurrency_for(case), true))?;
                    works.push(w);
                    let (free, fw) =
                        self.rt.block_on(subject::held_snapshot(&target, n, self.concurrency_for(case), false))?;
                    theirs.push(free.jobs_per_sec());
                    free_works.push(fw);
                    held
                }
                Case::ProcessSequenced => {
                    self.rt.block_on(subject::process_sequenced(&target, n, n, self.concurrency_for(case)))?
                }
                Case::ProcessSequenced100 => {
                    self.rt.block_on(subject::process_sequenced(&target, n, FEW_KEYS, self.concurrency_for(case)))?
                }
                Case::ClaimSequenced => self.claim_run(&target, n, true)?,
                Case::ClaimWorkflow => {
                    // Its baseline (the claim without waiting steps) runs inside the same run.
                    let (with, without) = self.claim_workflow_run(&target, n)?;
                    theirs.push(without.jobs_per_sec());
                    with
                }
                Case::LatencyWorkflow => {
                    let (measure, l) = self.rt.block_on(crate::workflow::latency(&target, n))?;
                    starts.push(l);
                    measure
                }
                Case::ProcessFair => self.rt.block_on(flow::process_fair(&target, n, self.concurrency_for(case)))?,
                Case::ClaimFlow => {
                    // The plain claim alternates with it run by run, so their ratio sees the same machine.
                    theirs.push(self.rt.block_on(flow::claim(&target, n, flow::Claim::Plain))?.jobs_per_sec());
                    keyed.push(self.rt.block_on(flow::claim(&target, n, flow::Claim::PlainKeyed))?.jobs_per_sec());
                    self.rt.block_on(flow::claim(&target, n, flow::Claim::Controlled))?
                }
                Case::ProcessMemory => {
                    let (measure, mem) = self.process_memory_run(&target, n)?;
                    memory.push(mem);
                    measure
                }
                Case::Reconcile => {
                    let (measure, mem) = self.reconcile_run(&target, n)?;
                    memory.push(mem);
                    measure
                }
                Case::Http => {
                    // Its baseline (in-process enqueue) runs inside the same run, on the same database.
                    let run = self.rt.block_on(http::run(&target, n))?;
                    theirs.push(run.in_process.jobs_per_sec());
                    latencies.push(run.latency);
                    run.http
                }
                Case::Retention | Case::RetentionPartitioned => {
                    let old = n * RETENTION_OLD_PER_JOB;
                    let partitioned = case == Case::RetentionPartitioned;
                    let (measure, p) =
                        self.rt.block_on(retention::run(&target, n, old, CONCURRENCY, true, partitioned))?;
                    pruned.extend(p);
                    measure
                }
                Case::Million => {
                    let (big, small, scale) = self.million_run(&target)?;
                    theirs.push(small.jobs_per_sec());
                    scales.push(scale);
                    big
                }
                Case::Latency | Case::LatencyLoaded => {
                    let loaded = case == Case::LatencyLoaded;
                    let (measure, l) = self.rt.block_on(latency::run(&target, n, loaded))?;
                    starts.push(l);
                    measure
                }
                Case::LatencyCross => {
                    let (measure, l) = self.rt.block_on(latency::run_cross(&target, n))?;
                    starts.push(l);
                    if let Target::Postgres { .. } = &target {
                        for (wake, runs) in floors.iter_mut() {
                            runs.push(self.floor_run(&target, n, *wake)?);
                        }
                    }
                    measure
                }
                Case::IdleCpu => {
                    idle.push(self.rt.block_on(idle_cpu::idle_cpu(&target))?);
                    Measure { jobs: 1, secs: idle_cpu::IDLE_SECS as f64 }
                }
                Case::Stall => {
                    let (measure, l) = self.rt.block_on(stall::run(&target))?;
                    stalls.push(l);
                    measure
                }
                Case::Dashboard => {
                    let times = self.rt.block_on(dashboard::run(&target, n))?;
                    pages.push(times);
                    Measure { jobs: n, secs: (times.jobs_page_ms + times.overview_ms) / 1_000.0 }
                }
            };
            ours.push(measure.jobs_per_sec());
            if baseline.is_some()
                && cached.is_none()
                && !matches!(
                    case,
                    Case::Http | Case::Million | Case::HeldSnapshot | Case::ClaimFlow | Case::ClaimWorkflow
                )
            {
                theirs.push(self.baseline_run(case, &target, n)?.jobs_per_sec());
            }
        }
        if let (Some(b), Some(runs)) = (baseline, &cached) {
            theirs.clone_from(runs);
            eprintln!("{} {}: reusing the baseline runs measured for `{b}`", case.name(), sync.label(backend));
        } else if let Some(b) = baseline {
            self.baselines.insert((b, backend.name(), sync, n), theirs.clone());
        }
        let jobs_per_sec = median(&ours);
        let baseline_jobs_per_sec = (!theirs.is_empty()).then(|| median(&theirs));
        let mem = |f: fn(&Memory) -> f64| {
            (!memory.is_empty()).then(|| round(median(&memory.iter().map(f).collect::<Vec<_>>()), 1))
        };
        let process = matches!(
            case,
            Case::Process
                | Case::ProcessMemory
                | Case::ProcessSequenced
                | Case::ProcessSequenced100
                | Case::ProcessFair
                | Case::ClaimSequenced
                | Case::ClaimFlow
                | Case::ClaimWorkflow
                | Case::Retention
                | Case::RetentionPartitioned
                | Case::Million
                | Case::HeldSnapshot
        );
        Ok(Row {
            case: case.name(),
            backend: backend.name(),
            sync: sync.label(backend),
            jobs: n,
            jobs_per_sec: round(jobs_per_sec, 1),
            seconds: (case == Case::Reconcile).then(|| round(n as f64 / jobs_per_sec, 3)),
            baseline_jobs_per_sec: baseline_jobs_per_sec.map(|b| round(b, 1)),
            ratio: baseline_jobs_per_sec.map(|b| round(jobs_per_sec / b, 3)),
            runs: self.runs,
            unique: case.unique(),
            jobs_per_txn: match case {
                Case::Enqueue | Case::EnqueueOrmCeiling => Some(1),
                Case::EnqueueBatch => Some(BATCH),
                _ => None,
            },
            concurrency: process.then_some(self.concurrency_for(case)),
            baseline,
            run_jobs_per_sec: ours.iter().map(|v| round(*v, 1)).collect(),
            baseline_run_jobs_per_sec: theirs.iter().map(|v| round(*v, 1)).collect(),
            load_avg_1m: load_avg(),
            rss_before_mb: mem(|m| m.rss_before_mb),
            peak_rss_mb: mem(|m| m.peak_rss_mb),
            rss_after_mb: mem(|m| m.rss_after_mb),
            vm_hwm_mb: mem(|m| m.vm_hwm_mb),
            hwm_reset: (!memory.is_empty()).then(|| memory.iter().all(|m| m.hwm_reset)),
            sse_p50_ms: latency(&latencies, |l| l.p50_ms),
            sse_p99_ms: latency(&latencies, |l| l.p99_ms),
            sse_max_ms: latency(&latencies, |l| l.max_ms),
            start_p50_ms: latency(&starts, |l| l.p50_ms),
            start_p99_ms: latency(&starts, |l| l.p99_ms),
            start_max_ms: latency(&starts, |l| l.max_ms),
            start_waited_100ms: (!starts.is_empty()).then(|| starts.iter().map(|l| l.waited).sum()),
            floor_in_process_p50_ms: latency(&floors[0].1, |l| l.p50_ms),
            floor_in_process_p99_ms: latency(&floors[0].1, |l| l.p99_ms),
            floor_listen_p50_ms: latency(&floors[1].1, |l| l.p50_ms),
            floor_listen_p99_ms: latency(&floors[1].1, |l| l.p99_ms),
            floor_listen_and_claim_p50_ms: latency(&floors[2].1, |l| l.p50_ms),
            floor_listen_and_claim_p99_ms: latency(&floors[2].1, |l| l.p99_ms),
            stall_enqueue_p50_ms: latency(&stalls, |l| l.p50_ms),
            stall_enqueue_max_ms: latency(&stalls, |l| l.max_ms),
            stall_enqueue_waited_100ms: (!stalls.is_empty()).then(|| stalls.iter().map(|l| l.waited).sum()),
            idle_cpu_percent: (!idle.is_empty()).then(|| round(median(&idle), 3)),
            jobs_page_ms: page_time(&pages, |p| p.jobs_page_ms),
            overview_ms: page_time(&pages, |p| p.overview_ms),
            orm_ceiling_jobs_per_sec: (!ceilings.is_empty()).then(|| round(median(&ceilings), 1)),
            orm_ceiling_ratio: (!ceilings.is_empty()).then(|| round(jobs_per_sec / median(&ceilings), 3)),
            orm_ceiling_run_jobs_per_sec: (!ceilings.is_empty())
                .then(|| ceilings.iter().map(|v| round(*v, 1)).collect()),
            claim_10k_ms: scale(&scales, |s| s.claim_small_ms, 3),
            claim_1m_ms: scale(&scales, |s| s.claim_big_ms, 3),
            claim_1m_head_ms: scale(&scales, |s| s.claim_head_ms, 3),
            keyed_plain_jobs_per_sec: (!keyed.is_empty()).then(|| round(median(&keyed), 1)),
            peak_rss_100k_mb: scale(&scales, |s| s.rss_small_mb, 1),
            peak_rss_1m_mb: scale(&scales, |s| s.rss_big_mb, 1),
            db_mb_after_drain: scale(&scales, |s| s.drained_mb, 1),
            db_mb_after_vacuum: scale(&scales, |s| s.reclaimed_mb, 1),
            wal_bytes_per_job_enqueue: per_job(&works, |w| Some(w.enqueue_bytes), 0),
            wal_bytes_per_job_drain: per_job(&works, |w| Some(w.drain_bytes), 0),
            wal_bytes_per_job: per_job(&works, |w| Some(w.life_bytes()), 0),
            rows_per_job: per_job(&works, |w| w.rows, 2),
            commits_per_job: per_job(&works, |w| w.commits, 3),
            dead_tuples: per_job(&works, |w| w.dead.map(|d| d as f64), 0).map(|d| d as i64),
            baseline_wal_bytes_per_job_drain: per_job(&free_works, |w| Some(w.drain_bytes), 0),
            baseline_dead_tuples: per_job(&free_works, |w| w.dead.map(|d| d as f64), 0).map(|d| d as i64),
            old_jobs: matches!(case, Case::Retention | Case::RetentionPartitioned).then_some(n * RETENTION_OLD_PER_JOB),
            pruned_during_drain: (!pruned.is_empty())
                .then(|| median(&pruned.iter().map(|p| p.during_drain as f64).collect::<Vec<_>>()).round() as u64),
            prune_all_secs: (!pruned.is_empty())
                .then(|| round(median(&pruned.iter().map(|p| p.all_secs).collect::<Vec<_>>()), 1)),
        })
    }
}

/// The median over runs of one figure of the database's work, when every run measured it.
fn per_job(runs: &[work::Work], f: fn(&work::Work) -> Option<f64>, digits: i32) -> Option<f64> {
    let values = runs.iter().map(f).collect::<Option<Vec<f64>>>()?;
    (!values.is_empty()).then(|| round(median(&values), digits))
}

/// The median over runs of one latency figure, when the case measured any.
fn latency(runs: &[latency::Latency], f: fn(&latency::Latency) -> f64) -> Option<f64> {
    (!runs.is_empty()).then(|| round(median(&runs.iter().map(f).collect::<Vec<_>>()), 2))
}

/// The median over runs of one figure of case `million`, when the case ran.
fn scale(runs: &[million::Scale], f: fn(&million::Scale) -> f64, digits: i32) -> Option<f64> {
    (!runs.is_empty()).then(|| round(median(&runs.iter().map(f).collect::<Vec<_>>()), digits))
}

/// The median over runs of one page's time, when the case measured any.
fn page_time(runs: &[dashboard::PageTimes], f: fn(&dashboard::PageTimes) -> f64) -> Option<f64> {
    (!runs.is_empty()).then(|| round(median(&runs.iter().map(f).collect::<Vec<_>>()), 1))
}

/// The 1-minute load average from `/proc/loadavg`.
fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

impl Runner {
    /// One run of case `million`: the big drain's rate, with the figures it is compared with.
    pub(crate) fn million_run(&self, target: &Target) -> Result<(Measure, Measure, million::Scale), BoxError> {
        let sync = target.sync();
        let claim_small_ms = self.claim_run(target, million::SMALL_CLAIM, false)?.secs * 1000.0;
        let (small, _) = self.process_memory_run(target, million::SMALL_DRAIN)?;
        let (_, small_memory) = self.process_memory_run(target, million::MEMORY_DRAIN)?;
        let prepared = self.rt.block_on(subject::backlog(target, million::BIG))?;
        let measured = (|| {
            let claim_big_ms = self.claim_cost(&prepared, sync, "noop")? * 1000.0;
            self.rt.block_on(million::add_head(&prepared.location, sync))?;
            let claim_head_ms = self.claim_cost(&prepared, sync, "noop")? * 1000.0;
            self.rt.block_on(million::remove_head(&prepared.location, sync))?;
            let (big, memory) = self.drain_in_child(&prepared, sync, million::BIG)?;
            let (drained_mb, reclaimed_mb) = self.rt.block_on(million::sizes(&prepared, sync))?;
            let scale = million::Scale {
                claim_small_ms,
                claim_big_ms,
                claim_head_ms,
                rss_small_mb: small_memory.peak_rss_mb,
                rss_big_mb: memory.peak_rss_mb,
                drained_mb,
                reclaimed_mb,
            };
            Ok::<_, BoxError>((big, scale))
        })();
        self.rt.block_on(prepared.remove())?;
        let (big, scale) = measured?;
        Ok((big, small, scale))
    }
}
