//! Commands on jobs: enqueue, list, get, retry, cancel, purge.

use outbox::JobFilter;
use outbox::ops;
use outbox::{EnqueueOpts, JobRecord, JobStatus};
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::cli::{CancelArgs, EnqueueArgs, ListArgs, RetryArgs};
use crate::fail::{Failure, Result, code};
use crate::kinds;
use crate::payload;
use crate::render::{self, Format, opt_time, short, table, time};

pub(super) async fn enqueue(db: &DatabaseConnection, args: EnqueueArgs, format: Format) -> Result<u8> {
    let payload = payload::read(&args.payload)?;
    let known = kinds::known()?.resolve(db, &args.kind).await?;
    let mut opts = EnqueueOpts::new();
    if let Some(q) = args.queue {
        opts = opts.queue(q);
    }
    if let Some(p) = args.priority {
        opts = opts.priority(p);
    }
    if let Some(d) = args.delay {
        opts = opts.delay(d);
    }
    if let Some(n) = args.max_attempts {
        opts = opts.max_attempts(n);
    }
    if let Some(k) = args.key {
        opts = opts.idempotency_key(k);
    }
    if let Some(k) = args.sequence {
        opts = opts.sequence(k);
    }
    if let Some(c) = args.cost {
        opts = opts.cost(c);
    }
    if let Some(s) = args.subject {
        opts = opts.subject(s);
    }
    let enqueued = outbox::enqueue_raw(db, &known.kind, payload, opts).await?;
    if let Some(wait) = args.wait {
        return super::claims::wait_for(db, enqueued.id(), wait, format).await;
    }
    let job = ops::get(db, enqueued.id()).await?;
    match format {
        Format::Json => render::json(&json!({ "id": job.id, "new": enqueued.is_new(), "job": job }))?,
        Format::Table if enqueued.is_new() => {
            println!("enqueued {} (kind {}, queue {}, run at {})", job.id, job.kind, job.queue, time(job.run_at));
        }
        Format::Table => {
            println!("already enqueued: {} is {} with the same idempotency key; nothing written", job.id, job.status)
        }
    }
    Ok(code::OK)
}

pub(super) fn job_rows(jobs: &[JobRecord]) -> Vec<Vec<String>> {
    jobs.iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.kind.clone(),
                j.queue.clone(),
                j.status.to_string(),
                format!("{}/{}", j.attempts, j.max_attempts),
                time(j.updated_at),
                short(j.last_error.as_deref().unwrap_or(""), 60),
            ]
        })
        .collect()
}

const JOB_HEADERS: [&str; 7] = ["ID", "KIND", "QUEUE", "STATUS", "ATTEMPTS", "UPDATED", "ERROR"];

pub(super) async fn list(db: &DatabaseConnection, args: ListArgs, format: Format) -> Result<u8> {
    let filter = JobFilter {
        status: args.status,
        kind: args.kind,
        queue: args.queue,
        since: args.since,
        sequence: args.sequence,
        key: args.key,
        subject: args.subject,
        before: args.before,
        limit: args.limit,
    };
    let jobs = ops::list(db, &filter).await?;
    match format {
        Format::Json => render::json(&jobs)?,
        Format::Table if jobs.is_empty() => println!("no jobs match"),
        Format::Table => print!("{}", table(&JOB_HEADERS, &job_rows(&jobs))),
    }
    Ok(code::OK)
}

pub(super) fn pretty(value: Option<&Value>) -> String {
    value.map_or_else(|| "-".to_owned(), Value::to_string)
}

/// The job's sequence, its place in it, and what it waits for.
fn sequence_line(job: &JobRecord) -> String {
    let Some(key) = &job.sequence_key else { return "-".into() };
    let place = job.sequence_no.map(|n| format!(" #{n}")).unwrap_or_default();
    match &job.waiting_for {
        Some(head) => format!("{key}{place}, waiting for job {head}"),
        None if job.holds_sequence => {
            format!("{key}{place}, holding the jobs behind it: retry it, or cancel it to let them run")
        }
        None => format!("{key}{place}"),
    }
}

pub(super) async fn get(db: &DatabaseConnection, id: &str, format: Format) -> Result<u8> {
    let job = ops::get(db, id).await?;
    let history = ops::history(db, id).await?;
    let links = ops::links(db, id).await?;
    if format == Format::Json {
        render::json(&json!({
            "job": job, "history": history, "workflow": links.workflow, "step": links.step,
            "parents": links.parents, "children": links.children,
        }))?;
        return Ok(code::OK);
    }
    let fields = [
        ("id", job.id.clone()),
        ("kind", job.kind.clone()),
        ("queue", job.queue.clone()),
        ("status", job.status.to_string()),
        ("attempts", format!("{} of {} (started {} times)", job.attempts, job.max_attempts, job.runs)),
        ("priority", job.priority.to_string()),
        ("run at", time(job.run_at)),
        ("created", time(job.created_at)),
        ("claimed", opt_time(job.claimed_at)),
        ("completed", opt_time(job.completed_at)),
        ("updated", time(job.updated_at)),
        ("locked by", job.locked_by.clone().unwrap_or_else(|| "-".into())),
        ("lease expires", opt_time(job.lease_expires_at)),
        ("key", job.idempotency_key.clone().unwrap_or_else(|| "-".into())),
        ("sequence", sequence_line(&job)),
        ("subject", job.subject.clone().unwrap_or_else(|| "-".into())),
        ("trace", job.trace.clone().unwrap_or_else(|| "-".into())),
        ("schema hash", job.schema_hash.clone()),
        ("last error", job.last_error.clone().unwrap_or_else(|| "-".into())),
        ("payload", pretty(Some(&job.payload))),
        ("output", pretty(job.output.as_ref())),
    ];
    for (name, value) in fields {
        println!("{name:<14}{value}");
    }
    println!("\nhistory");
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|e| {
            vec![
                time(e.at),
                e.event.to_string(),
                e.attempt.to_string(),
                e.worker.clone().unwrap_or_else(|| "-".into()),
                short(e.error.as_deref().unwrap_or(""), 80),
            ]
        })
        .collect();
    print!("{}", table(&["AT", "EVENT", "ATTEMPT", "WORKER", "ERROR"], &rows));
    // A workflow step: what it waits for (parents not yet counted) and what waits for it.
    if let (Some(workflow), Some(step)) = (&links.workflow, &links.step) {
        println!("\nstep          {step} of workflow {workflow}");
    }
    for (title, links) in [("parents", &links.parents), ("children", &links.children)] {
        if links.is_empty() {
            continue;
        }
        println!("\n{title}");
        let rows: Vec<Vec<String>> = links
            .iter()
            .map(|p| {
                let status = p.status.map_or_else(|| "gone".to_owned(), |s| s.to_string());
                let waits = if title == "parents" && !p.counted && job.status == outbox::JobStatus::Pending {
                    "waiting for it"
                } else {
                    ""
                };
                vec![p.step.clone(), p.kind.clone().unwrap_or_else(|| "-".into()), status, p.id.clone(), waits.into()]
            })
            .collect();
        print!("{}", table(&["STEP", "KIND", "STATUS", "JOB", ""], &rows));
    }
    Ok(code::OK)
}

pub(super) async fn retry(db: &DatabaseConnection, args: RetryArgs, format: Format) -> Result<u8> {
    if args.failed {
        let n = ops::retry_failed(db, args.kind.as_deref()).await?;
        match format {
            Format::Json => render::json(&json!({ "retried": n }))?,
            Format::Table => {
                println!("retried {n} failed job(s){}", args.kind.map(|k| format!(" of kind {k}")).unwrap_or_default())
            }
        }
        return Ok(code::OK);
    }
    if let Some(subject) = args.subject {
        let n = ops::retry_subject(db, &subject).await?;
        match format {
            Format::Json => render::json(&json!({ "retried": n, "subject": subject }))?,
            Format::Table => println!("retried {n} failed or cancelled job(s) about {subject}"),
        }
        return Ok(code::OK);
    }
    let id = args.id.ok_or_else(|| Failure::invalid("give a job id, --failed or --subject"))?;
    ops::retry(db, &id).await?;
    match format {
        Format::Json => render::json(&json!({ "retried": 1, "id": id }))?,
        Format::Table => println!("retried {id}: pending again, attempts start over"),
    }
    Ok(code::OK)
}

pub(super) async fn cancel(db: &DatabaseConnection, args: CancelArgs, format: Format) -> Result<u8> {
    if let Some(subject) = args.subject {
        let n = ops::cancel_subject(db, &subject).await?;
        match format {
            Format::Json => render::json(&json!({ "cancelled": n, "subject": subject }))?,
            Format::Table => println!("cancelled {n} pending job(s) about {subject}"),
        }
        return Ok(code::OK);
    }
    let id = &args.id.ok_or_else(|| Failure::invalid("give a job id or --subject"))?;
    let before = ops::get(db, id).await?;
    ops::cancel(db, id).await?;
    let after = ops::get(db, id).await?;
    let held = after.holds_sequence;
    let released = before.status.is_terminal();
    match format {
        Format::Json => render::json(&json!({ "cancelled": 1, "id": id, "released": released, "holds": held }))?,
        Format::Table if released => {
            println!(
                "cancelled {id}; the jobs behind it in sequence {} no longer wait for it",
                after.sequence_key.unwrap_or_default()
            )
        }
        Format::Table if held => println!(
            "cancelled {id}; it holds sequence {}: the jobs behind it wait until you retry it or cancel it again",
            after.sequence_key.unwrap_or_default()
        ),
        Format::Table => println!("cancelled {id}"),
    }
    Ok(code::OK)
}

pub(super) async fn purge(
    db: &DatabaseConnection,
    statuses: &[JobStatus],
    older_than: std::time::Duration,
    format: Format,
) -> Result<u8> {
    if let Some(active) = statuses.iter().find(|s| !s.is_terminal()) {
        return Err(Failure::invalid(format!("--status {active} cannot be purged: only finished jobs can"))
            .hint("use completed, failed or cancelled; cancel pending jobs first"));
    }
    let n = ops::purge(db, statuses, older_than).await?;
    let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    match format {
        Format::Json => render::json(&json!({ "purged": n }))?,
        Format::Table => println!("purged {n} {} job(s) older than {}", names.join("/"), render::human(older_than)),
    }
    Ok(code::OK)
}
