//! A worker of your own, from the shell: record a kind, claim jobs, and complete, fail, extend or snooze
//! each one. Every call after the claim is fenced by the worker and the claim's run, like an in-process worker's
//! writes; and `enqueue --wait`, which waits for the job's outcome.

use outbox::remote::{self, ClaimRequest};
use outbox::{JobRecord, JobStatus, Kind, ops};
use sea_orm::DatabaseConnection;
use serde_json::json;

use crate::cli::{ClaimArgs, CompleteArgs, DefineKindArgs, ExtendArgs, FailArgs, SnoozeArgs};
use crate::fail::{Failure, Result, code};
use crate::handover;
use crate::payload;
use crate::render::{self, Format, time};

pub(super) async fn define_kind(db: &DatabaseConnection, args: DefineKindArgs, format: Format) -> Result<u8> {
    let schema = payload::read_as(&args.schema, "--schema")?;
    let kind = Kind::untyped(&args.kind, schema, &args.queue, args.priority, args.max_attempts, args.concurrency)?;
    ops::record_kind(db, &kind, "outbox define-kind").await?;
    match format {
        Format::Json => render::json(&json!({ "kind": kind.name(), "schema_hash": kind.schema_hash() }))?,
        Format::Table => {
            println!("recorded kind {} (queue {}, schema {})", kind.name(), kind.queue(), kind.schema_hash())
        }
    }
    Ok(code::OK)
}

pub(super) async fn claim(db: &DatabaseConnection, args: ClaimArgs) -> Result<u8> {
    let kinds = if args.kinds.is_empty() {
        let recorded: Vec<String> = ops::kinds(db).await?.into_iter().map(|k| k.name).collect();
        if recorded.is_empty() {
            return Err(Failure::invalid("no kind is recorded in this database, so there is nothing to claim")
                .hint("name kinds with --kind, or record one with `outbox define-kind`"));
        }
        recorded
    } else {
        args.kinds
    };
    let req = ClaimRequest {
        worker: args.worker.clone(),
        host: remote::host_name(),
        pid: Some(i64::from(std::process::id())),
        kinds,
        queues: (!args.queues.is_empty()).then_some(args.queues),
        limit: args.limit,
        lease: args.lease,
    };
    // A Ctrl-C or SIGTERM stops a waiting claim between looks; a claim already running finishes, and what it
    // took is given back rather than left claimed for its lease.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signals = tokio::spawn(async move {
        interrupted().await;
        let _ = stop.send(true);
    });
    let until_stopped = {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let claimed = match args.wait {
        Some(wait) => {
            // Commits of other processes wake the wait at once.
            let _watch = ops::watch(db).await?;
            remote::claim_waiting_until(db, &req, wait, until_stopped).await
        }
        None => remote::claim(db, &req).await,
    };
    let jobs = claimed?;
    let interrupted = || *stopped.borrow();
    if interrupted() {
        signals.abort();
        give_back(db, &args.worker, &jobs).await;
        return Ok(code::INTERRUPTED);
    }
    let mut out = handover::Output::stdout();
    // A line not read by the time its lease runs out is left to the reader: the lease brings the job back anyway.
    let lease_end = tokio::time::Instant::now() + args.lease;
    for (i, job) in jobs.iter().enumerate() {
        let mut line =
            serde_json::to_value(job).map_err(|e| Failure::error(format!("encoding job `{}`: {e}", job.id)))?;
        line["worker"] = json!(args.worker);
        if let Err(e) = out.hand_over(&format!("{line}\n"), lease_end, &interrupted).await {
            signals.abort();
            // What the reader did not take goes back to pending now, its attempt unused. Stopped while this line
            // waits in the pipe, the reader may still read it: it keeps its claim (its lease brings it back
            // otherwise), and only the lines not written go back.
            let kept = usize::from(e.kind() == std::io::ErrorKind::Interrupted);
            give_back(db, &args.worker, &jobs[i + kept..]).await;
            return match e.kind() {
                // The reader took what it wanted (`| head -1`), leaving this line unread: not a failure of this
                // command.
                std::io::ErrorKind::BrokenPipe => Ok(code::OK),
                std::io::ErrorKind::Interrupted => Ok(code::INTERRUPTED),
                _ => Err(Failure::error(format!("writing the claimed job `{}`: {e}", job.id))
                    .hint("the jobs not written were given back")),
            };
        }
    }
    signals.abort();
    Ok(code::OK)
}

/// Resolves on Ctrl-C or SIGTERM (never, where they cannot be listened for).
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// Gives back claimed jobs that no reader took; a failure is said on stderr, and their leases bring them back.
async fn give_back(db: &DatabaseConnection, worker: &str, jobs: &[remote::RemoteJob]) {
    if jobs.is_empty() {
        return;
    }
    if let Err(e) = remote::release(db, worker, jobs).await {
        eprintln!("could not give back {} claimed jobs, which run again once their leases run out: {e}", jobs.len());
    }
}

pub(super) async fn complete(db: &DatabaseConnection, args: CompleteArgs, format: Format) -> Result<u8> {
    let output = args.output.as_deref().map(|o| payload::read_as(o, "--output")).transpose()?;
    let c = &args.claim;
    remote::complete(db, &c.worker, &c.id, c.run, output).await?;
    done(format, &c.id, JobStatus::Completed, None)
}

pub(super) async fn fail(db: &DatabaseConnection, args: FailArgs, format: Format) -> Result<u8> {
    let c = &args.claim;
    let status = remote::fail(db, &c.worker, &c.id, c.run, &args.reason, !args.permanent, args.retry_in).await?;
    let retry_at = if status == JobStatus::Pending { Some(ops::get(db, &c.id).await?.run_at) } else { None };
    done(format, &c.id, status, retry_at.map(time))
}

pub(super) async fn extend(db: &DatabaseConnection, args: ExtendArgs, format: Format) -> Result<u8> {
    let c = &args.claim;
    let until = remote::heartbeat(db, &c.worker, &c.id, c.run, args.by).await?;
    match format {
        Format::Json => render::json(&json!({ "id": c.id, "lease_expires_at": until }))?,
        Format::Table => println!("{}: leased until {}", c.id, time(until)),
    }
    Ok(code::OK)
}

pub(super) async fn snooze(db: &DatabaseConnection, args: SnoozeArgs, format: Format) -> Result<u8> {
    let c = &args.claim;
    remote::snooze(db, &c.worker, &c.id, c.run, args.delay).await?;
    let run_at = ops::get(db, &c.id).await?.run_at;
    done(format, &c.id, JobStatus::Pending, Some(time(run_at)))
}

/// Prints the job's new status (and when it runs again).
fn done(format: Format, id: &str, status: JobStatus, run_at: Option<String>) -> Result<u8> {
    match (format, run_at) {
        (Format::Json, run_at) => render::json(&json!({ "id": id, "status": status, "run_at": run_at }))?,
        (Format::Table, Some(at)) => println!("{id}: {status}, runs again at {at}"),
        (Format::Table, None) => println!("{id}: {status}"),
    }
    Ok(code::OK)
}

/// `enqueue --wait`: waits for the job to end and prints it; exit 0 when it completed, 7 otherwise.
pub(super) async fn wait_for(
    db: &DatabaseConnection,
    id: &str,
    wait: std::time::Duration,
    format: Format,
) -> Result<u8> {
    let job = match ops::wait(db, id, wait).await {
        Err(outbox::Error::CompletedUnkept { .. }) => {
            match format {
                Format::Json => render::json(&json!({ "id": id, "status": JobStatus::Completed, "kept": false }))?,
                Format::Table => println!("{id} completed (its kind keeps nothing: no output is kept)"),
            }
            return Ok(code::OK);
        }
        waited => waited?,
    };
    print_outcome(&job, format)?;
    Ok(if job.status == JobStatus::Completed { code::OK } else { code::JOB_FAILED })
}

fn print_outcome(job: &JobRecord, format: Format) -> Result<()> {
    match format {
        Format::Json => render::json(job),
        Format::Table => {
            let mut line = format!("{} {} (attempt {} of {})", job.id, job.status, job.attempts, job.max_attempts);
            if let Some(output) = &job.output {
                line.push_str(&format!(": output {output}"));
            }
            if job.status != JobStatus::Completed
                && let Some(error) = &job.last_error
            {
                line.push_str(&format!(": {error}"));
            }
            println!("{line}");
            Ok(())
        }
    }
}
