//! Timing one claim: case `claim_sequenced` (and its baseline over unsequenced jobs) and the claims case
//! `million` times, each issued on the raw connection as the worker issues it.

use crate::engine::SyncMode;
use crate::runner::Runner;
use crate::scratch::{self, Location, Target};
use crate::stats::Measure;
use crate::{BoxError, CONCURRENCY, raw, raw_pg, subject};

/// Pending jobs per sequence in `claim_sequenced`.
const PER_SEQUENCE: u64 = 100;
/// Claims timed per run of `claim_sequenced`.
const CLAIM_REPS: usize = 21;

impl Runner {
    /// One claim of [`CONCURRENCY`] jobs over `n` pending ones (in sequences of [`PER_SEQUENCE`] when
    /// `sequenced`), timed on the raw connection as the worker issues it.
    pub(crate) fn claim_run(&self, target: &Target, n: u64, sequenced: bool) -> Result<Measure, BoxError> {
        let prepared = if sequenced {
            self.rt.block_on(subject::sequenced_backlog(target, n, (n / PER_SEQUENCE).max(1)))?
        } else {
            self.rt.block_on(subject::backlog(target, n))?
        };
        let secs = self.claim_cost(&prepared, target.sync(), if sequenced { "step" } else { "noop" });
        self.rt.block_on(prepared.remove())?;
        Ok(Measure { jobs: CONCURRENCY as u64, secs: secs? })
    }

    /// The median time of one claim of [`CONCURRENCY`] jobs of `kind` (rolled back, [`CLAIM_REPS`] times).
    pub(crate) fn claim_cost(&self, prepared: &scratch::Prepared, sync: SyncMode, kind: &str) -> Result<f64, BoxError> {
        let batch = CONCURRENCY as u64;
        match &prepared.location {
            Location::File(path) => raw::claim_cost(path, sync, &[kind], batch, CLAIM_REPS),
            Location::Url(url) => self.rt.block_on(raw_pg::claim_cost(url, &[kind], batch, CLAIM_REPS)),
        }
    }
}
