//! The worker loop: its start-up steps, claims sized to the free slots, lease renewals and rescues, and its
//! graceful stop.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::Worker;
use super::handler::JobContext;
use super::presence::Presence;
use super::task::{TaskResult, outcome, with_timeout};
use super::watchdog::Ticket;
use crate::error::Result;
use crate::time::ms_after;

use crate::storage::{ClaimedJob, Outcome, now_ms};
use crate::wake;

pub(super) struct InFlight {
    pub(super) job: ClaimedJob,
    cancel: CancellationToken,
    /// Its entry with the watchdog, when its kind has a timeout.
    pub(super) ticket: Option<Ticket>,
}

pub(super) struct Loop {
    pub(super) worker: Worker,
    tasks: JoinSet<TaskResult>,
    pub(super) in_flight: HashMap<Id, InFlight>,
    next_heartbeat: Instant,
    next_rescue: Instant,
    /// A job of a sequence or of a limited kind ended since the last claim: the next job of its sequence, or
    /// a slot under its kind's limit, may be free now.
    pub(super) freed: bool,
    /// Handlers running, for the registry entry.
    pub(super) running: Arc<AtomicUsize>,
    /// The registry entry's first write, which the first claim waits for (see [`Loop::work`]).
    registered: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// How long the first claim waits for the registry entry's first write.
const REGISTRY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) async fn run(worker: Worker, shutdown: CancellationToken, drain: bool) -> Result<()> {
    let now = Instant::now();
    let mut lp = Loop {
        next_heartbeat: now + worker.config.lease / 3,
        next_rescue: now,
        worker,
        tasks: JoinSet::new(),
        in_flight: HashMap::new(),
        freed: false,
        running: Arc::default(),
        registered: None,
    };
    tracing::info!(worker = %lp.worker.id, concurrency = lp.worker.config.concurrency, "worker started");
    let background = lp.worker.background.take().ok_or(crate::error::Error::WorkerStopped)?;
    // Wake-ups from other processes arrive on this runtime, where the loop they wake runs.
    lp.worker.store.listen();
    lp.worker.store.open();
    let mut presence = Presence::start(&lp.worker, &background, Arc::clone(&lp.running));
    lp.registered = presence.first_write();
    for (name, step) in std::mem::take(&mut lp.worker.on_start) {
        tracing::info!(worker = %lp.worker.id, step = %name, "running a start-up step");
        // A shutdown asked for meanwhile (Ctrl-C during a long reconciliation) stops the step: nothing is claimed yet.
        tokio::select! {
            done = step(lp.worker.db.clone(), lp.worker.id.clone()) => if let Err(e) = done {
                tracing::error!(worker = %lp.worker.id, step = %name, error = %e, "a start-up step failed; the worker goes on");
            },
            _ = shutdown.cancelled() => {
                tracing::info!(worker = %lp.worker.id, step = %name, "shutdown during a start-up step; it was stopped");
                break;
            }
        }
    }
    // Periodic jobs and retention run beside the loop, not in a drain (which ends when the queue is empty), on
    // the background thread and its own connections: a handler that stalls this runtime cannot hold their
    // transactions (and with them SQLite's write lock) open.
    let chores = CancellationToken::new();
    let mut running_chores = Vec::new();
    if !drain {
        let (db, id) = (background.db(), &lp.worker.id);
        if !lp.worker.schedules.is_empty() {
            let schedules = Arc::clone(&lp.worker.schedules);
            running_chores.push(background.spawn(crate::periodic::run(
                db.clone(),
                schedules,
                id.clone(),
                chores.clone(),
            )));
        }
        let retention = crate::retention::run(db, lp.worker.retention.clone(), id.clone(), chores.clone());
        running_chores.push(background.spawn(retention));
    }
    let result = lp.work(&shutdown, drain).await;
    chores.cancel();
    // In-flight jobs first: their outcomes (and any the watchdog gave back) are written before anything stops.
    let stopped = lp.stop().await;
    for chore in running_chores {
        let _ = chore.await;
    }
    presence.stop(&background).await;
    lp.worker.store.close().await;
    background.shutdown().await;
    tracing::info!(worker = %lp.worker.id, "worker stopped");
    result.and(stopped)
}

impl Loop {
    async fn work(&mut self, shutdown: &CancellationToken, drain: bool) -> Result<()> {
        let config = self.worker.config.clone();
        // Claim only when a useful batch fits, unless the worker is idle.
        let min_claim = (config.concurrency / 4).max(1);
        // Why the next claim runs, or `None` while nothing calls for one. Logged with each claim at `debug`: a
        // claim's cause is what tells a wake-up from a poll, and this process's own wake-up (`wake`) from one a
        // watch heard (`heard`).
        let mut claim_now = Some("start");
        let mut next_poll = Instant::now() + config.poll_interval;
        let mut db_backoff = config.poll_interval;
        // When a job a claim left behind for a rate or a hold may be taken: the loop claims again then.
        let mut flow_at: Option<Instant> = None;
        let mut wakes_seen = wake::wakes();
        let mut heard_seen = wake::heard();
        loop {
            // Registered before the counts are read: a wake-up either shows in a count now or fires `notified`.
            // One that fires while another branch of the `select!` below wins is not lost with the dropped
            // future: its count shows it on the next pass.
            let notified = wake::notifier().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wakes = wake::wakes();
            if wakes != wakes_seen {
                wakes_seen = wakes;
                claim_now = claim_now.or(Some("wake"));
            }
            // A claim both call for is this process's wake-up's: the watch often hears the same commit.
            let heard = wake::heard();
            if heard != heard_seen {
                heard_seen = heard;
                claim_now = claim_now.or(Some("heard"));
            }
            while let Some(done) = self.tasks.try_join_next_with_id() {
                self.settle(done, false)?;
            }
            // Draining ends on an empty claim with nothing in flight, so an idle drain asks once more. A job
            // that ended in a sequence or under a limit may have freed the next one: its outcome goes out
            // before the claim.
            if drain && self.tasks.is_empty() && flow_at.is_none() {
                claim_now = claim_now.or(Some("drain"));
            }
            if std::mem::take(&mut self.freed) {
                claim_now = claim_now.or(Some("freed"));
            }
            if shutdown.is_cancelled() {
                return Ok(());
            }
            self.maintain().await;
            // One batch of outcomes may wait for the writer while the next runs (measured on a networked database: 0.65
            // of the bare-driver baseline without that overlap, 0.99 with it); beyond that, outcomes not yet
            // written keep their slots, so claiming never runs further ahead of a slow writer.
            let unwritten = self.worker.store.unwritten_count().saturating_sub(config.concurrency);
            let busy = self.tasks.len() + unwritten;
            let free = config.concurrency.saturating_sub(busy);
            if let Some(reason) = claim_now
                && free > 0
                && (free >= min_claim || self.tasks.is_empty())
            {
                if let Some(registered) = self.registered.take() {
                    // The registry's first write goes in before the worker's own writes begin. On SQLite it
                    // otherwise waited for the write lock behind them (the busy handler of the pool it runs on
                    // sleeps up to 100 ms between tries), sometimes to the end of a drain, and the stop waited for
                    // it (64 ms in one `process` drain of eight). A write that takes longer (another process
                    // holding the lock) is not waited out.
                    tokio::select! {
                        _ = registered => {}
                        () = tokio::time::sleep(REGISTRY_WAIT) => {}
                        () = shutdown.cancelled() => return Ok(()),
                    }
                }
                let now = now_ms();
                let unwritten_before = self.worker.store.unwritten_count();
                match self.worker.store.claim(free, now, ms_after(now, config.lease)).await {
                    Ok(jobs) => {
                        tracing::debug!(worker = %self.worker.id, reason, wanted = free, claimed = jobs.len(), "claimed");
                        let held = crate::flow::hold_ends_after(now_ms());
                        let at = match (self.worker.store.flow_wake_at(), held) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        flow_at = at.map(|at| {
                            let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                            Instant::now() + std::time::Duration::from_millis(wait)
                        });
                        db_backoff = config.poll_interval;
                        claim_now = (jobs.len() == free).then_some("full batch");
                        // Jobs held back by a rate or a hold that ends are still to drain: the loop sleeps until
                        // they may be taken.
                        if drain && jobs.is_empty() && self.tasks.is_empty() && flow_at.is_none() {
                            // An outcome not yet written may let the next job of its sequence go: write
                            // them, then look once more. One written while the claim ran counts too: the
                            // claim may have read from before it.
                            if unwritten_before == 0 && self.worker.store.unwritten_count() == 0 {
                                return Ok(());
                            }
                            self.worker.store.flush().await?;
                            claim_now = Some("drain");
                            continue;
                        }
                        for job in jobs {
                            self.spawn(job);
                        }
                        if claim_now.is_some() {
                            continue;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(worker = %self.worker.id, error = %e, retry_in = ?db_backoff, "claiming failed");
                        claim_now = None;
                        next_poll = Instant::now() + db_backoff;
                        db_backoff = (db_backoff * 2).min(config.max_db_backoff);
                    }
                }
            }
            let mut wake_at = next_poll.min(self.next_heartbeat).min(self.next_rescue);
            if let Some(at) = flow_at {
                wake_at = wake_at.min(at);
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                Some(done) = self.tasks.join_next_with_id() => self.settle(done, false)?,
                // Every wake-up is counted before it notifies: the counts, read on the next pass, say whose it was.
                _ = &mut notified => {}
                _ = sleep_until(wake_at) => {
                    if flow_at.is_some_and(|at| Instant::now() >= at) {
                        flow_at = None;
                        claim_now = claim_now.or(Some("flow"));
                    }
                    if Instant::now() >= next_poll {
                        claim_now = claim_now.or(Some("poll"));
                        next_poll = Instant::now() + db_backoff.max(config.poll_interval);
                    }
                }
            }
        }
    }

    fn spawn(&mut self, job: ClaimedJob) {
        let Some(registered) = self.worker.handlers.get(&job.kind) else {
            // Claims are filtered by kind, so this cannot happen; give the job back rather than lose it.
            let _ = self.worker.store.finish(job.finished(Outcome::Released));
            return;
        };
        tracing::debug!(job_id = %job.id, kind = %job.kind, queue = %job.queue, attempt = job.attempt, "job claimed");
        let cancel = CancellationToken::new();
        let ctx = JobContext {
            id: job.id.clone(),
            kind: job.kind.clone(),
            queue: job.queue.clone(),
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            run: job.run,
            cancel: cancel.clone(),
            store: self.worker.store.clone(),
            db: self.worker.db.clone(),
        };
        let fut = (registered.handler)(job.payload.clone(), job.schema_hash.clone(), ctx);
        let span = crate::trace::job_span(&job.id, &job.kind, &job.queue, job.attempt, job.run, job.trace.as_deref());
        let fut = super::task::in_span(fut, span);
        let per_key = self.worker.rate_per_key.contains(&job.kind);
        let fut = super::task::held_when_rate_limited(fut, self.worker.db.clone(), &job, per_key);
        let (handle, ticket) = match registered.timeout {
            None => (self.tasks.spawn(async move { (fut.await, None) }), None),
            Some(limit) => {
                // The task keeps the same deadlines as the watchdog, which acts if the task cannot.
                let started = Instant::now();
                let times = (limit, self.worker.config.cancel_grace);
                let backoff = registered.retry.backoff(job.attempt);
                let keep_claim = job.sequenced || self.worker.limited.contains(&job.kind);
                let ticket = self.worker.watchdog.watch(&job, times, backoff, keep_claim, cancel.clone());
                let task = with_timeout(fut, started, times, cancel.clone(), ticket.clone());
                (self.tasks.spawn(task), Some(ticket))
            }
        };
        self.in_flight.insert(handle.id(), InFlight { job, cancel, ticket });
        self.running.store(self.in_flight.len(), Ordering::Relaxed);
    }

    /// Renews the leases of in-flight jobs and rescues expired claims when they are due.
    async fn maintain(&mut self) {
        let now = Instant::now();
        let config = &self.worker.config;
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + config.lease / 3;
            // A job past its timeout that keeps its claim for its sequence or limit is left to expire.
            let renewed = self.in_flight.values().filter(|f| !f.ticket.as_ref().is_some_and(Ticket::abandoned));
            let mut ids: Vec<String> = renewed.map(|f| f.job.id.clone()).collect();
            ids.extend(self.worker.store.unwritten());
            if !ids.is_empty()
                && let Err(e) = self.worker.store.extend(ids, ms_after(now_ms(), config.lease)).await
            {
                tracing::warn!(worker = %self.worker.id, error = %e, "renewing leases failed");
            }
        }
        if now >= self.next_rescue {
            self.next_rescue = now + config.rescue_interval;
            match self.worker.store.rescue(now_ms()).await {
                Ok(rescued) => {
                    if rescued.iter().any(|r| r.status == "failed") {
                        wake::outcome_written();
                    }
                    for r in rescued {
                        let (job_id, kind, queue, attempt) = (&r.id, &r.kind, &r.queue, r.attempt);
                        let owner = r.previous_owner.as_deref().unwrap_or("?");
                        if r.status == "failed" {
                            tracing::error!(
                                job_id,
                                kind,
                                queue,
                                attempt,
                                owner,
                                "lease expired with no attempts left; job failed"
                            );
                        } else {
                            tracing::warn!(
                                job_id,
                                kind,
                                queue,
                                attempt,
                                owner,
                                "lease expired; job rescued to pending"
                            );
                        }
                    }
                }
                Err(e) => tracing::warn!(worker = %self.worker.id, error = %e, "rescuing expired claims failed"),
            }
        }
    }

    /// Graceful stop: let in-flight jobs finish within the grace period, cancel the rest, give their jobs
    /// back, and wait until every outcome is written. A job the watchdog has settled (its claim given back, or
    /// kept to expire) is not waited for: its handler may hold its thread for as long as it blocks.
    async fn stop(&mut self) -> Result<()> {
        let config = self.worker.config.clone();
        if self.unsettled() > 0 {
            tracing::info!(worker = %self.worker.id, in_flight = self.unsettled(), grace = ?config.shutdown_grace, "waiting for in-flight jobs");
            self.wait_tasks(Some(Instant::now() + config.shutdown_grace), false).await?;
        }
        if self.unsettled() > 0 {
            tracing::info!(worker = %self.worker.id, in_flight = self.unsettled(), "cancelling in-flight jobs");
            for f in self.in_flight.values() {
                f.cancel.cancel();
            }
            self.wait_tasks(Some(Instant::now() + config.cancel_grace), true).await?;
        }
        // An aborted task ends at its handler's next yield. One whose handler blocks its thread cannot: past its
        // timeout the watchdog settles its job, which is all this waits for; without a timeout, the job's lease
        // is renewed until the handler returns.
        self.tasks.abort_all();
        self.wait_tasks(None, true).await?;
        // Handlers that returned meanwhile, of jobs the watchdog settled: what they returned is written as it
        // would be had the worker gone on (a kept claim's outcome; a given-back one's is refused by its fence).
        while let Some(done) = self.tasks.try_join_next_with_id() {
            self.settle(done, true)?;
        }
        // Left: the tasks of jobs the watchdog settled, whose handlers still hold their threads. Each ends when its
        // handler returns, and what it returns is discarded. `forget` returns once a give-back being made is
        // queued, so the flush writes it.
        for (_, f) in self.in_flight.drain() {
            if let Some(ticket) = &f.ticket {
                self.worker.watchdog.forget(ticket);
            }
        }
        self.tasks.detach_all();
        self.running.store(0, Ordering::Relaxed);
        self.worker.store.flush().await
    }

    /// In-flight jobs still to settle: all but those the watchdog settled, whose handlers may still run.
    fn unsettled(&self) -> usize {
        self.in_flight.values().filter(|f| !f.ticket.as_ref().is_some_and(Ticket::given_up)).count()
    }

    /// Settles tasks as they end until no job is left to settle or `deadline` passes, renewing leases meanwhile.
    async fn wait_tasks(&mut self, deadline: Option<Instant>, cancelling: bool) -> Result<()> {
        let watchdog = self.worker.watchdog.clone();
        loop {
            // Enabled before the tickets are read: a job the watchdog settles after the count wakes this.
            let gave_up = watchdog.gave_up();
            tokio::pin!(gave_up);
            gave_up.as_mut().enable();
            if self.unsettled() == 0 {
                return Ok(());
            }
            let at = deadline.map_or(self.next_heartbeat, |d| d.min(self.next_heartbeat));
            tokio::select! {
                Some(done) = self.tasks.join_next_with_id() => self.settle(done, cancelling)?,
                () = &mut gave_up => {}
                () = sleep_until(at) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(());
                    }
                    self.maintain().await;
                }
            }
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: pass it to [`Worker::run_until`].
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = async {
            match signal(SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

impl Loop {
    /// Records how a handler's task ended. `cancelling`: the worker asked it to stop.
    pub(super) fn settle(
        &mut self,
        done: std::result::Result<(Id, TaskResult), JoinError>,
        cancelling: bool,
    ) -> Result<()> {
        let (id, result, timed_out) = match done {
            Ok((id, (result, timed_out))) => (id, Ok(result), timed_out),
            Err(e) => (e.id(), Err(e), None),
        };
        let Some(InFlight { job, ticket, .. }) = self.in_flight.remove(&id) else { return Ok(()) };
        self.running.store(self.in_flight.len(), Ordering::Relaxed);
        self.freed |= job.sequenced || job.has_children || self.worker.limited.contains(&job.kind);
        // Decided as the handler ended (its task called `returned` then); here only for a panic or an abort.
        let ours = ticket.as_ref().is_none_or(|t| {
            let ours = t.returned();
            self.worker.watchdog.forget(t);
            ours
        });
        if !ours {
            // The watchdog gave the claim back while the handler held its thread: what it returned now is
            // too late to count (the claim's fence would refuse it too).
            let dropped = timed_out.is_some_and(|t| t.dropped);
            if !dropped {
                tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempt,
                    succeeded = matches!(result, Ok(Ok(_))),
                    "a handler returned after its timeout had given its claim back; its result is discarded");
            }
            return Ok(());
        }
        let retry = self.worker.handlers.get(&job.kind);
        let outcome = outcome(&job, result, timed_out, cancelling, retry);
        let mut finished = job.finished(outcome);
        if !job.sequenced {
            finished.keep = self.worker.retention.keep(&job.kind);
        }
        self.worker.store.finish(finished)
    }
}
