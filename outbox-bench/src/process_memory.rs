//! Case `process_memory`: a backlog preloaded here and drained in a fresh child process (this binary again,
//! `--drain-child`), so that its RSS figures hold the worker alone; both sides of that child.

use crate::engine::SyncMode;
use crate::memory::{Memory, WatchedDrain};
use crate::runner::Runner;
use crate::scratch::{self, Location, Target};
use crate::stats::Measure;
use crate::{BoxError, CONCURRENCY, subject};

/// The hidden first argument that makes this binary the child of a `process_memory` run:
/// `--drain-child <db file or URL> <FULL|NORMAL> <jobs>`; it prints one [`WatchedDrain`] as JSON.
pub(crate) const DRAIN_CHILD: &str = "--drain-child";

pub(crate) fn drain_child(argv: &[String]) -> Result<(), BoxError> {
    let [location, sync, jobs] = argv else {
        return Err(format!("usage: {DRAIN_CHILD} <db file or URL> <sync> <jobs>").into());
    };
    let sync = <SyncMode as clap::ValueEnum>::from_str(sync, true)?;
    let jobs: u64 = jobs.parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(subject::drain_watched(&Location::parse(location), sync, jobs, CONCURRENCY))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

impl Runner {
    /// Preloads a database here, then drains it in a fresh child process whose RSS holds the worker alone.
    pub(crate) fn process_memory_run(&self, target: &Target, n: u64) -> Result<(Measure, Memory), BoxError> {
        let prepared = self.rt.block_on(subject::backlog(target, n))?;
        let drained = self.drain_in_child(&prepared, target.sync(), n);
        self.rt.block_on(prepared.remove())?;
        drained
    }

    /// Drains the `n` pending `noop` jobs of `prepared` in a fresh child process.
    pub(crate) fn drain_in_child(
        &self,
        prepared: &scratch::Prepared,
        sync: SyncMode,
        n: u64,
    ) -> Result<(Measure, Memory), BoxError> {
        let output = std::process::Command::new(std::env::current_exe()?)
            .arg(DRAIN_CHILD)
            .arg(prepared.location.arg())
            .arg(sync.name())
            .arg(n.to_string())
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !output.status.success() {
            return Err(format!("the draining child failed: {}", output.status).into());
        }
        let report: WatchedDrain = serde_json::from_slice(&output.stdout)?;
        Ok((Measure { jobs: n, secs: report.secs }, report.memory))
    }
}
