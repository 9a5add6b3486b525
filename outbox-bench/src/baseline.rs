//! The baseline side of each comparison: one run of what a case is measured against, on a database of its
//! own (the same SQL through rusqlite or bare sqlx, or outbox under other conditions).

use crate::case::{BATCH, Case, RETENTION_OLD_PER_JOB};
use crate::runner::Runner;
use crate::scratch::{Location, Target};
use crate::stats::Measure;
use crate::{BoxError, CONCURRENCY, raw, raw_pg, retention, subject};

impl Runner {
    pub(crate) fn baseline_run(&self, case: Case, target: &Target, n: u64) -> Result<Measure, BoxError> {
        let prepared = match case {
            Case::ProcessSequenced | Case::ProcessSequenced100 | Case::ProcessFair => {
                return Ok(self.rt.block_on(subject::process(target, n, self.concurrency_for(case)))?.0);
            }
            Case::ClaimSequenced => return self.claim_run(target, n, false),
            Case::Enqueue | Case::EnqueueOrmCeiling | Case::EnqueueBatch => self.rt.block_on(subject::empty(target))?,
            Case::Process | Case::ProcessMemory => self.rt.block_on(subject::backlog(target, n))?,
            Case::Reconcile => return Err("the reconcile case has no baseline".into()),
            Case::Http => return Err("the http case measures its baseline within its own run".into()),
            Case::Dashboard
            | Case::Latency
            | Case::LatencyLoaded
            | Case::LatencyCross
            | Case::LatencyWorkflow
            | Case::IdleCpu
            | Case::Million
            | Case::Stall => {
                return Err(format!("the {} case has no baseline", case.name()).into());
            }
            Case::ClaimFlow | Case::ClaimWorkflow => {
                return Err(format!("the {} case measures its baseline within its own run", case.name()).into());
            }
            Case::HeldSnapshot => {
                return Ok(self.rt.block_on(subject::held_snapshot(target, n, self.concurrency_for(case), false))?.0);
            }
            Case::Retention | Case::RetentionPartitioned => {
                let old = n * RETENTION_OLD_PER_JOB;
                let partitioned = case == Case::RetentionPartitioned;
                return Ok(self.rt.block_on(retention::run(target, n, old, CONCURRENCY, false, partitioned))?.0);
            }
        };
        let sync = target.sync();
        let measure = match (&prepared.location, case) {
            (Location::File(path), Case::EnqueueBatch) => {
                raw::enqueue_batch(path, sync, &subject::order_kind()?, n, BATCH)
            }
            (Location::File(path), Case::Process | Case::ProcessMemory) => {
                raw::process(path, sync, &subject::noop_kind()?, n, self.concurrency_for(case) as u64)
            }
            (Location::File(path), _) => raw::enqueue(path, sync, &subject::order_kind()?, n),
            (Location::Url(url), Case::EnqueueBatch) => {
                self.rt.block_on(raw_pg::enqueue_batch(url, &subject::order_kind()?, n, BATCH))
            }
            (Location::Url(url), Case::Process | Case::ProcessMemory) => {
                self.rt.block_on(raw_pg::process(url, &subject::noop_kind()?, n, self.concurrency_for(case) as u64))
            }
            (Location::Url(url), _) => self.rt.block_on(raw_pg::enqueue(url, &subject::order_kind()?, n)),
        };
        self.rt.block_on(prepared.remove())?;
        measure
    }
}
