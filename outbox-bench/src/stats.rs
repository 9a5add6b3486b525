//! One timed run, and the median and rounding that turn a case's runs into the figures of its row.

/// One timed run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measure {
    pub(crate) jobs: u64,
    pub(crate) secs: f64,
}

impl Measure {
    pub(crate) fn jobs_per_sec(self) -> f64 {
        self.jobs as f64 / self.secs
    }
}

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}
