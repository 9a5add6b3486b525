//! The worker's claims on PostgreSQL that still hold jobs whose outcomes are not written: each claim's row in
//! `outbox_claims` goes in the statement that writes the outcome of its last job.

use std::collections::HashMap;
use std::sync::Arc;

use super::complete;
use crate::storage::Finished;

/// This worker's claims whose jobs' outcomes are not all written yet, by the id of their row in `outbox_claims`:
/// the writer deletes a claim's row in the statement that writes the outcome of its last job. A row whose jobs
/// never all get written (an outcome given up on, a worker that stops) is left to the rescuers, which delete it
/// once its lease and its jobs' have run out (see `RESCUE` in `rescue.rs`).
///
/// A job is counted in its latest claim by this worker, with that claim's run: a job whose claim ran out and was
/// rescued can be claimed again by the same worker while its first run's handler is still going, and that run's
/// late outcome (refused by the fence) must neither count against the new claim nor delete its row, which would
/// leave the job claimed with no claim the rescuers can find.
#[derive(Debug, Default)]
pub(in crate::storage::postgres) struct ClaimCounts {
    /// Each job's latest claim by this worker: its run and the claim's row.
    claim_of: HashMap<String, (i32, i64)>,
    left: HashMap<i64, usize>,
}

pub(in crate::storage::postgres) type Claims = Arc<std::sync::Mutex<ClaimCounts>>;

pub(in crate::storage::postgres) fn claim_counts(claims: &Claims) -> std::sync::MutexGuard<'_, ClaimCounts> {
    // Plain counts, changed in one step each: a panic elsewhere while it was locked leaves nothing half-done.
    claims.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ClaimCounts {
    /// Job `id` was claimed for its run `run` by the claim `claim`.
    pub(super) fn claimed(&mut self, claim: i64, id: String, run: i32) {
        if let Some((_, before)) = self.claim_of.insert(id, (run, claim)) {
            self.drop_one(before);
        }
        *self.left.entry(claim).or_default() += 1;
    }

    fn drop_one(&mut self, claim: i64) {
        if let Some(n) = self.left.get_mut(&claim) {
            *n -= 1;
            if *n == 0 {
                self.left.remove(&claim);
            }
        }
    }

    /// The claims whose jobs with unwritten outcomes are all in `batch`: written with it, they are done.
    pub(super) fn emptied_by(&self, batch: &[Finished]) -> Vec<i64> {
        let mut in_batch: HashMap<i64, usize> = HashMap::new();
        for f in complete::latest_runs(batch) {
            if let Some(&(run, claim)) = self.claim_of.get(&f.id)
                && run == f.run
            {
                *in_batch.entry(claim).or_default() += 1;
            }
        }
        let mut done: Vec<i64> =
            in_batch.into_iter().filter(|(claim, n)| self.left.get(claim) == Some(n)).map(|(claim, _)| claim).collect();
        done.sort_unstable();
        done
    }

    /// The outcomes of `runs` (job id, run) were written (whatever their fences let through); those of earlier
    /// runs than a job's latest claim leave that claim counted.
    pub(super) fn written<'a>(&mut self, runs: impl IntoIterator<Item = (&'a str, i32)>) {
        for (id, run) in runs {
            if let Some(&(latest, claim)) = self.claim_of.get(id)
                && latest == run
            {
                self.claim_of.remove(id);
                self.drop_one(claim);
            }
        }
    }
}
