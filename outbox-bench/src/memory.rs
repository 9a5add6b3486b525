//! Resident-set figures of the runs made in a child process (`process_memory`, `reconcile`), from
//! `/proc/self/status`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::BoxError;

/// Resident-set figures of one `process_memory` run, in MiB.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Memory {
    /// VmRSS with the database open, before the worker starts.
    pub(crate) rss_before_mb: f64,
    /// Highest VmRSS sampled every 50 ms during the drain.
    pub(crate) peak_rss_mb: f64,
    /// VmRSS after the drain.
    pub(crate) rss_after_mb: f64,
    /// VmHWM after the drain (reset before it when the kernel allows, see `hwm_reset`).
    pub(crate) vm_hwm_mb: f64,
    /// Whether VmHWM was reset before the drain (`/proc/self/clear_refs`); if not it is the process's peak.
    pub(crate) hwm_reset: bool,
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()
}

fn status_mb(field: &str) -> Result<f64, BoxError> {
    let kb = status_kb(field).ok_or_else(|| format!("cannot read {field} from /proc/self/status"))?;
    Ok(kb as f64 / 1024.0)
}

/// Samples VmRSS every 50 ms on its own thread until stopped; yields the highest sample in KiB.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl RssSampler {
    fn start() -> Result<RssSampler, BoxError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("rss-sampler".into()).spawn(move || {
            let mut peak = 0;
            loop {
                peak = peak.max(status_kb("VmRSS").unwrap_or(0));
                if flag.load(Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?;
        Ok(RssSampler { stop, thread })
    }

    fn finish(self) -> Result<f64, BoxError> {
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.thread.join().map_err(|_| "the RSS sampler panicked")?;
        Ok(peak as f64 / 1024.0)
    }
}

/// What a run in a child process reports: [`drain_watched`](crate::subject::drain_watched) and the `reconcile` case.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct WatchedDrain {
    /// Seconds the measured work took (for a drain, the worker build included).
    pub(crate) secs: f64,
    /// The resident set around and during it.
    pub(crate) memory: Memory,
}

/// Runs `work` while sampling VmRSS (VmHWM reset first where the kernel allows); returns its result and the
/// memory figures.
pub(crate) async fn watch<T>(
    work: impl std::future::Future<Output = Result<T, BoxError>>,
) -> Result<(T, Memory), BoxError> {
    let rss_before_mb = status_mb("VmRSS")?;
    // Writing 5 resets VmHWM to the current RSS (Linux 4.0+).
    let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let sampler = RssSampler::start()?;
    let done = work.await;
    let peak_rss_mb = sampler.finish()?;
    let value = done?;
    let rss_after_mb = status_mb("VmRSS")?;
    let vm_hwm_mb = status_mb("VmHWM")?;
    let memory =
        Memory { rss_before_mb, peak_rss_mb: peak_rss_mb.max(rss_after_mb), rss_after_mb, vm_hwm_mb, hwm_reset };
    Ok((value, memory))
}
