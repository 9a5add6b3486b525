//! Periodic jobs: a schedule (cron expression or fixed interval) and a function that builds each tick's job.
//! Every worker that registers a schedule wakes at its ticks; the database lets exactly one of them enqueue
//! each tick (a compare-and-set on the schedule's row, in the transaction that enqueues the job).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use sea_orm::DatabaseConnection;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::enqueue::{EnqueueOpts, enqueue_raw};
use crate::error::{Error, Result};
use crate::job::Job;
use crate::kind::Kind;
use crate::storage::schedules::ScheduleRow;
use crate::storage::{self, now_ms};
use crate::time::from_ms;
use crate::wake;

/// What a schedule does about ticks that passed while no worker running it was up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedTicks {
    /// Forget them: the next job is the next tick's (the default).
    #[default]
    Skip,
    /// Enqueue one job for the latest missed tick at start, however many were missed.
    CatchUp,
}

impl MissedTicks {
    fn as_str(self) -> &'static str {
        match self {
            MissedTicks::Skip => "skip",
            MissedTicks::CatchUp => "catch_up",
        }
    }
}

/// When a schedule ticks.
#[derive(Debug, Clone)]
pub(crate) enum Timing {
    /// A cron expression read in a time zone.
    Cron(Box<cron::Schedule>, Tz),
    /// Every so many milliseconds, counted from the Unix epoch so every process agrees on the ticks.
    Every(i64),
}

impl Timing {
    /// A cron expression: five fields (minute to weekday) or six and seven (with seconds first, and a year).
    fn cron(expr: &str, tz: Tz) -> Result<Timing> {
        let fields = expr.split_whitespace().count();
        let full = if fields == 5 { format!("0 {expr}") } else { expr.to_owned() };
        let schedule = cron::Schedule::from_str(&full)
            .map_err(|e| Error::Invalid(format!("the cron expression `{expr}` is not valid: {e}")))?;
        Ok(Timing::Cron(Box::new(schedule), tz))
    }

    fn every(interval: Duration) -> Result<Timing> {
        let ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        if ms < 100 {
            return Err(Error::Invalid(format!(
                "a schedule's interval must be at least 100ms; {interval:?} was given"
            )));
        }
        Ok(Timing::Every(ms))
    }

    /// Reads back what [`Timing::spec`] stored.
    pub(crate) fn from_spec(spec: &str, time_zone: &str) -> Result<Timing> {
        let tz = parse_tz(time_zone)?;
        if let Some(expr) = spec.strip_prefix("cron ") {
            return Timing::cron(expr, tz);
        }
        if let Some(ms) = spec.strip_prefix("every ").and_then(|s| s.strip_suffix("ms")).and_then(|s| s.parse().ok()) {
            return Ok(Timing::Every(ms));
        }
        Err(Error::Invalid(format!("the stored schedule `{spec}` is neither `cron …` nor `every …ms`")))
    }

    /// How the schedule is stored and shown.
    pub(crate) fn spec(&self) -> String {
        match self {
            Timing::Cron(schedule, _) => format!("cron {}", schedule.source()),
            Timing::Every(ms) => format!("every {ms}ms"),
        }
    }

    fn time_zone(&self) -> String {
        match self {
            Timing::Cron(_, tz) => tz.name().to_owned(),
            Timing::Every(_) => "UTC".to_owned(),
        }
    }

    /// The first tick after `t` (milliseconds since the epoch).
    pub(crate) fn next_after(&self, t: i64) -> Option<i64> {
        match self {
            Timing::Every(ms) => t.div_euclid(*ms).checked_add(1)?.checked_mul(*ms),
            Timing::Cron(schedule, tz) => {
                let at = tz.timestamp_millis_opt(t).single()?;
                schedule.after(&at).next().map(|d| d.timestamp_millis())
            }
        }
    }

    /// How many ticks fall in `from..to` (counted up to 10,000).
    fn between(&self, from: i64, to: i64) -> u64 {
        let mut n = 0;
        let mut at = Some(from);
        while let Some(t) = at.filter(|t| *t < to && n < 10_000) {
            n += 1;
            at = self.next_after(t);
        }
        n
    }

    /// The latest tick at or before `t`.
    pub(crate) fn latest_at(&self, t: i64) -> Option<i64> {
        match self {
            Timing::Every(ms) => t.div_euclid(*ms).checked_mul(*ms),
            Timing::Cron(schedule, tz) => {
                // Ticks fall on whole seconds: the latest before the next second is the latest at or before `t`.
                let at = tz.timestamp_millis_opt(t.div_euclid(1000).checked_add(1)?.checked_mul(1000)?).single()?;
                schedule.after(&at).next_back().map(|d| d.timestamp_millis())
            }
        }
    }
}

fn parse_tz(name: &str) -> Result<Tz> {
    Tz::from_str(name).map_err(|_| {
        Error::Invalid(format!("`{name}` is not a time zone of the IANA database (such as `Europe/Paris` or `UTC`)"))
    })
}

type Build = Arc<dyn Fn(DateTime<Utc>) -> Result<Value> + Send + Sync>;

/// A periodic job: when it ticks and what each tick enqueues. Register it with
/// [`crate::WorkerBuilder::schedule`]; every worker sharing the database may register the same schedule, and
/// each tick still enqueues one job.
///
/// ```
/// use outbox::{Job, Schedule};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Job, Serialize, Deserialize, JsonSchema)]
/// #[job(kind = "nightly_report")]
/// struct NightlyReport { day: String }
///
/// let schedule = Schedule::cron("nightly-report", "0 30 2 * * *", |tick| NightlyReport {
///     day: tick.format("%Y-%m-%d").to_string(),
/// })
/// .time_zone("Europe/Paris")
/// .catch_up();
/// # assert!(schedule.check().is_ok());
/// ```
#[derive(Clone)]
pub struct Schedule {
    name: String,
    timing: std::result::Result<Timing, String>,
    kind: std::result::Result<Arc<Kind>, String>,
    missed: MissedTicks,
    build: Build,
    opts: EnqueueOpts,
    /// A cron expression kept to be re-read in the time zone given later.
    expr: Option<String>,
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("name", &self.name)
            .field("timing", &self.timing)
            .field("missed", &self.missed)
            .finish_non_exhaustive()
    }
}

impl Schedule {
    /// Ticks at the times of a cron expression, in UTC unless [`Schedule::time_zone`] says otherwise: five
    /// fields (`minute hour day-of-month month day-of-week`), or six and seven with seconds first and a year
    /// last. `build` makes each tick's job from the tick's time.
    pub fn cron<J: Job>(
        name: impl Into<String>,
        expr: &str,
        build: impl Fn(DateTime<Utc>) -> J + Send + Sync + 'static,
    ) -> Schedule {
        Schedule::typed(name.into(), Timing::cron(expr, Tz::UTC), Some(expr.to_owned()), build)
    }

    /// Ticks every `interval`, counted from the Unix epoch (so all processes agree on the ticks).
    pub fn every<J: Job>(
        name: impl Into<String>,
        interval: Duration,
        build: impl Fn(DateTime<Utc>) -> J + Send + Sync + 'static,
    ) -> Schedule {
        Schedule::typed(name.into(), Timing::every(interval), None, build)
    }

    fn typed<J: Job>(
        name: String,
        timing: Result<Timing>,
        expr: Option<String>,
        build: impl Fn(DateTime<Utc>) -> J + Send + Sync + 'static,
    ) -> Schedule {
        let build: Build = Arc::new(move |tick| {
            serde_json::to_value(build(tick)).map_err(|source| Error::Serde { kind: J::KIND.into(), source })
        });
        Schedule::new(name, timing, expr, Kind::of::<J>(), build)
    }

    /// [`Schedule::cron`] for a kind known by schema (the `outbox` command's schedules file): `build` makes
    /// each tick's payload, validated like any enqueue.
    pub fn raw_cron(
        name: impl Into<String>,
        kind: impl Into<Arc<Kind>>,
        expr: &str,
        build: impl Fn(DateTime<Utc>) -> Value + Send + Sync + 'static,
    ) -> Schedule {
        Schedule::raw(name.into(), kind.into(), Timing::cron(expr, Tz::UTC), Some(expr.to_owned()), build)
    }

    /// [`Schedule::every`] for a kind known by schema.
    pub fn raw_every(
        name: impl Into<String>,
        kind: impl Into<Arc<Kind>>,
        interval: Duration,
        build: impl Fn(DateTime<Utc>) -> Value + Send + Sync + 'static,
    ) -> Schedule {
        Schedule::raw(name.into(), kind.into(), Timing::every(interval), None, build)
    }

    fn raw(
        name: String,
        kind: Arc<Kind>,
        timing: Result<Timing>,
        expr: Option<String>,
        build: impl Fn(DateTime<Utc>) -> Value + Send + Sync + 'static,
    ) -> Schedule {
        Schedule::new(name, timing, expr, Ok(kind), Arc::new(move |tick| Ok(build(tick))))
    }

    /// A schedule with the defaults: missed ticks skipped, default enqueue options.
    fn new(
        name: String,
        timing: Result<Timing>,
        expr: Option<String>,
        kind: Result<Arc<Kind>>,
        build: Build,
    ) -> Schedule {
        Schedule {
            name,
            timing: timing.map_err(|e| e.to_string()),
            kind: kind.map_err(|e| e.to_string()),
            missed: MissedTicks::Skip,
            build,
            opts: EnqueueOpts::new(),
            expr,
        }
    }

    /// Reads the cron expression in this IANA time zone (`Europe/Paris`); intervals ignore it.
    pub fn time_zone(mut self, name: &str) -> Self {
        if let Some(expr) = &self.expr {
            self.timing = parse_tz(name).and_then(|tz| Timing::cron(expr, tz)).map_err(|e| e.to_string());
        } else if self.timing.is_ok() && name != "UTC" {
            self.timing = Err(format!(
                "schedule `{}` ticks at an interval, which a time zone cannot shift; give a cron expression",
                self.name
            ));
        }
        self
    }

    /// At start, enqueue one job for the latest tick missed while no worker ran the schedule
    /// ([`MissedTicks::CatchUp`]); by default missed ticks are skipped.
    pub fn catch_up(mut self) -> Self {
        self.missed = MissedTicks::CatchUp;
        self
    }

    /// Sets what to do about missed ticks.
    pub fn missed_ticks(mut self, missed: MissedTicks) -> Self {
        self.missed = missed;
        self
    }

    /// Options of each tick's job (queue, priority, attempts). Its idempotency key is always the schedule's
    /// name and the tick.
    pub fn enqueue_opts(mut self, opts: EnqueueOpts) -> Self {
        self.opts = opts;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the schedule is valid: its expression, time zone and kind; each error names the schedule.
    pub fn check(&self) -> Result<()> {
        let fail = |e: &String| Error::Invalid(format!("schedule `{}`: {e}", self.name));
        if self.name.trim().is_empty() {
            return Err(Error::Invalid("a schedule's name is empty".into()));
        }
        self.timing.as_ref().map_err(fail)?;
        self.kind.as_ref().map_err(fail)?;
        Ok(())
    }

    /// The first tick after `t`, if the schedule is valid and has one.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.timing.as_ref().ok()?.next_after(t.timestamp_millis()).map(from_ms)
    }
}

/// The next tick of a stored schedule after `t`, for the `outbox schedules` listing.
pub(crate) fn next_stored(spec: &str, time_zone: &str, t: i64) -> Result<Option<i64>> {
    Ok(Timing::from_spec(spec, time_zone)?.next_after(t))
}

/// A checked schedule, as the worker runs it.
pub(crate) struct Ready {
    name: String,
    timing: Timing,
    kind: Arc<Kind>,
    missed: MissedTicks,
    build: Build,
    opts: EnqueueOpts,
}

impl Ready {
    pub(crate) fn of(schedule: Schedule) -> Result<Ready> {
        schedule.check()?;
        let fail = |e: String| Error::Invalid(format!("schedule `{}`: {e}", schedule.name));
        Ok(Ready {
            timing: schedule.timing.map_err(fail)?,
            kind: schedule.kind.map_err(fail)?,
            name: schedule.name,
            missed: schedule.missed,
            build: schedule.build,
            opts: schedule.opts,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn row(&self) -> ScheduleRow {
        ScheduleRow {
            name: self.name.clone(),
            kind: self.kind.name().to_owned(),
            spec: self.timing.spec(),
            time_zone: self.timing.time_zone(),
            missed: self.missed.as_str().to_owned(),
        }
    }

    /// Enqueues the job of `tick` unless another process already did; its id when this call did.
    async fn fire(&self, db: &DatabaseConnection, tick: i64) -> Result<Option<String>> {
        let row = self.row();
        let at = from_ms(tick);
        // A tick another worker took is not built again (a race past this read is settled by `claim_tick`).
        let taken = storage::schedules::list(db)
            .await?
            .into_iter()
            .any(|s| s.name == self.name && s.last_tick.is_some_and(|t| t.timestamp_millis() >= tick));
        if taken {
            return Ok(None);
        }
        // The application's build function runs before the write lock is taken, and off the worker's background
        // thread (a blocking pool), however long it takes. A panicking one fails this tick, not every schedule.
        let build = Arc::clone(&self.build);
        let payload = tokio::task::spawn_blocking(move || build(at)).await.map_err(|_| {
            Error::Invalid(format!("the job builder of schedule `{}` panicked at tick {}", self.name, at.to_rfc3339()))
        })??;
        let txn = storage::begin_write(db).await?;
        if !storage::schedules::claim_tick(&txn, &row, tick, now_ms()).await? {
            txn.rollback().await.map_err(Error::db(format!("rolling back tick {tick} of `{}`", self.name)))?;
            return Ok(None);
        }
        let key = format!("{}@{}", self.name, at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let job = enqueue_raw(&txn, &self.kind, payload, self.opts.clone().idempotency_key(key)).await?;
        storage::schedules::set_tick_job(&txn, &self.name, job.id()).await?;
        txn.commit().await.map_err(Error::db(format!("committing tick {tick} of schedule `{}`", self.name)))?;
        wake::wake();
        Ok(Some(job.id().to_owned()))
    }
}

/// Runs the schedules until `stop`: registers them, then enqueues each tick. A schedule that catches up
/// starts from its last enqueued tick, so its first pass enqueues the latest tick missed meanwhile (once).
pub(crate) async fn run(db: DatabaseConnection, schedules: Arc<Vec<Ready>>, worker: String, stop: CancellationToken) {
    let mut cursors = Vec::with_capacity(schedules.len());
    for s in schedules.iter() {
        let now = now_ms();
        let conn = &db;
        let row = s.row();
        let last: Result<Option<i64>> = storage::schedules::register(conn, &row, now).await;
        let last = last.unwrap_or_else(|e| {
            tracing::warn!(schedule = %s.name, worker, error = %e, "registering the schedule failed");
            None
        });
        cursors.push(match (s.missed, last) {
            (MissedTicks::CatchUp, Some(last)) => last.min(now),
            _ => now,
        });
    }
    loop {
        let nexts: Vec<Option<i64>> = schedules.iter().zip(&cursors).map(|(s, c)| s.timing.next_after(*c)).collect();
        let Some(earliest) = nexts.iter().flatten().min().copied() else {
            stop.cancelled().await;
            return;
        };
        let wait = Duration::from_millis(u64::try_from(earliest.saturating_sub(now_ms())).unwrap_or(0));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let now = now_ms();
        for (i, s) in schedules.iter().enumerate() {
            let Some(next) = nexts[i].filter(|n| *n <= now) else { continue };
            // Only the latest due tick runs: after a catch-up start, or when woken late (a suspended process).
            let due = s.timing.latest_at(now).unwrap_or(next).max(next);
            tick(&db, s, due, s.timing.between(next, due), &worker).await;
            cursors[i] = due;
        }
    }
}

async fn tick(db: &DatabaseConnection, s: &Ready, due: i64, skipped_ticks: u64, worker: &str) {
    let tick = from_ms(due).to_rfc3339();
    match s.fire(db, due).await {
        Ok(Some(job_id)) => tracing::info!(schedule = %s.name, kind = %s.kind.name(), job_id, tick, skipped_ticks,
            worker, "periodic job enqueued"),
        Ok(None) => tracing::debug!(schedule = %s.name, tick, worker, "tick already enqueued by another worker"),
        Err(e) => tracing::error!(schedule = %s.name, tick, worker, error = %e, "enqueuing a periodic job failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).expect("time").timestamp_millis()
    }

    #[test]
    fn cron_ticks_before_and_after() {
        let t = Timing::cron("*/5 * * * * *", Tz::UTC).expect("cron");
        assert_eq!(t.latest_at(ms("2026-01-01T00:00:07.250Z")), Some(ms("2026-01-01T00:00:05Z")));
        assert_eq!(t.latest_at(ms("2026-01-01T00:00:05Z")), Some(ms("2026-01-01T00:00:05Z")));
        assert_eq!(t.next_after(ms("2026-01-01T00:00:05Z")), Some(ms("2026-01-01T00:00:10Z")));
        let five = Timing::cron("30 2 * * *", Tz::UTC).expect("five fields");
        assert_eq!(five.next_after(ms("2026-01-01T00:00:00Z")), Some(ms("2026-01-01T02:30:00Z")));
        let paris = Timing::cron("0 0 9 * * *", parse_tz("Europe/Paris").expect("tz")).expect("cron");
        assert_eq!(paris.next_after(ms("2026-07-01T00:00:00Z")), Some(ms("2026-07-01T07:00:00Z")));
        assert_eq!(Timing::from_spec(&paris.spec(), "Europe/Paris").expect("spec").spec(), paris.spec());
    }

    #[test]
    fn intervals_count_from_the_epoch() {
        let t = Timing::every(Duration::from_secs(1)).expect("every");
        assert_eq!(t.next_after(1_500), Some(2_000));
        assert_eq!(t.latest_at(1_500), Some(1_000));
        assert_eq!(t.latest_at(2_000), Some(2_000));
        assert_eq!(t.between(2_000, 7_000), 5);
        assert_eq!(t.between(2_000, 2_000), 0);
        assert_eq!(Timing::from_spec(&t.spec(), "UTC").expect("spec").next_after(0), Some(1_000));
    }

    #[test]
    fn bad_schedules_name_the_fault() {
        let e = Timing::cron("61 * * * * *", Tz::UTC).expect_err("bad second").to_string();
        assert!(e.contains("`61 * * * * *`"), "{e}");
        let e = parse_tz("Mars/Olympus").expect_err("bad zone").to_string();
        assert!(e.contains("Mars/Olympus"), "{e}");
        assert!(Timing::every(Duration::from_millis(10)).is_err());
    }
}
