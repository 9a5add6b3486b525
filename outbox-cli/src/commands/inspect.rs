//! The overview commands: stats (the six questions), queues, workers, schema.

use outbox::JobStatus;
use outbox::ops::{self};
use outbox_server::KindSource;
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::fail::{Result, code};
use crate::kinds;
use crate::render::{self, Format, opt_time, short, table, time};

pub(super) fn section(title: &str, headers: &[&str], rows: &[Vec<String>]) {
    println!("{title}");
    if rows.is_empty() {
        println!("  none\n");
    } else {
        for line in table(headers, rows).lines() {
            println!("  {line}");
        }
        println!();
    }
}

pub(super) async fn stats(
    db: &DatabaseConnection,
    window: std::time::Duration,
    limit: u64,
    format: Format,
) -> Result<u8> {
    let mut stats = ops::stats(db, window).await?;
    stats.failed.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    stats.duplicates.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    if format == Format::Json {
        render::json(&stats)?;
        return Ok(code::OK);
    }
    let w = render::human(window);
    let outstanding: Vec<Vec<String>> = stats
        .counts
        .iter()
        .filter(|c| matches!(c.status, JobStatus::Pending | JobStatus::Claimed))
        .map(|c| vec![c.kind.clone(), c.status.to_string(), c.count.to_string(), time(c.oldest)])
        .collect();
    section("outstanding (pending and claimed, by kind)", &["KIND", "STATUS", "JOBS", "OLDEST"], &outstanding);
    let failed: Vec<Vec<String>> = stats
        .failed
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.kind.clone(),
                format!("{}/{}", j.attempts, j.max_attempts),
                time(j.updated_at),
                short(j.last_error.as_deref().unwrap_or(""), 70),
            ]
        })
        .collect();
    section("failed (latest first, with why)", &["ID", "KIND", "ATTEMPTS", "FAILED AT", "ERROR"], &failed);
    let stuck: Vec<Vec<String>> = stats
        .stuck
        .iter()
        .map(|j| {
            vec![j.id.clone(), j.kind.clone(), j.locked_by.clone().unwrap_or_default(), opt_time(j.lease_expires_at)]
        })
        .collect();
    section("stuck (claimed, lease expired)", &["ID", "KIND", "WORKER", "LEASE EXPIRED"], &stuck);
    let blocked: Vec<Vec<String>> = stats
        .blocked
        .iter()
        .map(|b| {
            vec![
                short(&b.sequence_key, 40),
                b.head.id.clone(),
                b.head.status.to_string(),
                b.waiting.to_string(),
                short(b.head.last_error.as_deref().unwrap_or(""), 50),
            ]
        })
        .collect();
    section(
        &format!(
            "blocked sequences: {} (each held by a failed or cancelled job; retry it, or cancel it to go on)",
            stats.blocked_sequences
        ),
        &["SEQUENCE", "HEAD", "STATUS", "WAITING", "ERROR"],
        &blocked,
    );
    let ms = |v: f64| render::human(std::time::Duration::from_millis(v.max(0.0) as u64));
    let durations: Vec<Vec<String>> = stats
        .durations
        .iter()
        .map(|d| {
            vec![d.kind.clone(), d.completed.to_string(), ms(d.avg_run_ms), ms(d.max_run_ms as f64), ms(d.avg_wait_ms)]
        })
        .collect();
    section(
        &format!("durations (completed in the last {w})"),
        &["KIND", "COMPLETED", "AVG RUN", "MAX RUN", "AVG WAIT"],
        &durations,
    );
    let duplicates: Vec<Vec<String>> = stats
        .duplicates
        .iter()
        .map(|d| {
            vec![d.kind.clone(), short(&d.key, 40), d.jobs.to_string(), d.active.to_string(), d.completed.to_string()]
        })
        .collect();
    section("duplicates (keys enqueued more than once)", &["KIND", "KEY", "JOBS", "ACTIVE", "COMPLETED"], &duplicates);
    let recent: Vec<Vec<String>> =
        stats.recent.iter().map(|c| vec![c.kind.clone(), c.status.to_string(), c.count.to_string()]).collect();
    section(&format!("recent (finished in the last {w})"), &["KIND", "STATUS", "JOBS"], &recent);
    let reconciled: Vec<Vec<String>> = stats
        .reconciliations
        .iter()
        .map(|r| {
            let counts = r.report.as_object().map(|o| {
                o.iter().filter(|(_, v)| v.is_u64()).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
            });
            vec![
                r.reconciler.clone(),
                time(r.at),
                r.worker.clone().unwrap_or_else(|| "-".into()),
                counts.unwrap_or_default(),
            ]
        })
        .collect();
    section("reconciliations (latest of each reconciler)", &["RECONCILER", "AT", "WORKER", "COUNTS"], &reconciled);
    Ok(code::OK)
}

pub(super) async fn queues(db: &DatabaseConnection, format: Format) -> Result<u8> {
    let queues = ops::queues(db).await?;
    match format {
        Format::Json => render::json(&queues)?,
        Format::Table if queues.is_empty() => println!("no jobs yet"),
        Format::Table => {
            let rows: Vec<Vec<String>> = queues
                .iter()
                .map(|q| {
                    vec![
                        q.queue.clone(),
                        q.available.to_string(),
                        q.scheduled.to_string(),
                        q.waiting.to_string(),
                        q.claimed.to_string(),
                        q.stuck.to_string(),
                        q.completed.to_string(),
                        q.failed.to_string(),
                        q.cancelled.to_string(),
                        opt_time(q.oldest_available),
                    ]
                })
                .collect();
            let headers = [
                "QUEUE",
                "AVAILABLE",
                "SCHEDULED",
                "WAITING",
                "CLAIMED",
                "STUCK",
                "COMPLETED",
                "FAILED",
                "CANCELLED",
                "OLDEST AVAILABLE",
            ];
            print!("{}", table(&headers, &rows));
        }
    }
    Ok(code::OK)
}

pub(super) async fn workers(db: &DatabaseConnection, format: Format) -> Result<u8> {
    let workers = ops::workers(db).await?;
    match format {
        Format::Json => render::json(&workers)?,
        Format::Table if workers.is_empty() => println!("no live workers"),
        Format::Table => {
            let rows: Vec<Vec<String>> = workers
                .iter()
                .map(|w| {
                    vec![
                        w.id.clone(),
                        w.host.clone(),
                        w.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                        short(&w.kinds.join(","), 50),
                        // A worker that names no queues serves every one.
                        w.queues.as_ref().map_or_else(|| "all".to_owned(), |q| short(&q.join(","), 30)),
                        match w.concurrency {
                            Some(max) => format!("{}/{max}", w.running),
                            None => w.running.to_string(),
                        },
                        if w.remote { "yes" } else { "no" }.to_owned(),
                        time(w.last_seen_at),
                    ]
                })
                .collect();
            let headers = ["ID", "HOST", "PID", "KINDS", "QUEUES", "RUNNING", "REMOTE", "LAST SEEN"];
            print!("{}", table(&headers, &rows));
        }
    }
    Ok(code::OK)
}

pub(super) async fn schedules(db: &DatabaseConnection, format: Format) -> Result<u8> {
    let schedules = ops::schedules(db).await?;
    match format {
        Format::Json => render::json(&schedules)?,
        Format::Table if schedules.is_empty() => println!("no schedules: workers register theirs when they start"),
        Format::Table => {
            let rows: Vec<Vec<String>> = schedules
                .iter()
                .map(|s| {
                    vec![
                        s.name.clone(),
                        s.kind.clone(),
                        s.spec.clone(),
                        s.time_zone.clone(),
                        s.missed.clone(),
                        opt_time(s.last_tick),
                        s.last_job_id.clone().unwrap_or_else(|| "-".into()),
                        opt_time(s.next_tick),
                    ]
                })
                .collect();
            let headers = ["NAME", "KIND", "SCHEDULE", "TIME ZONE", "MISSED", "LAST RUN", "LAST JOB", "NEXT RUN"];
            print!("{}", table(&headers, &rows));
        }
    }
    Ok(code::OK)
}

pub(super) async fn schema(db: &DatabaseConnection, kind: Option<&str>, format: Format) -> Result<u8> {
    if let Some(name) = kind {
        let known = kinds::known()?.resolve(db, name).await?;
        match format {
            Format::Json => render::json(&json!({
                "kind": name,
                "source": known.source,
                "schemaHash": known.kind.schema_hash(),
                "queue": known.kind.queue(),
                "maxAttempts": known.kind.max_attempts(),
                "sequence": known.kind.sequence(),
                "onSequenceFailure": known.kind.on_sequence_failure(),
                "concurrency": known.kind.concurrency(),
                "schema": known.kind.schema(),
            }))?,
            Format::Table => render::json(known.kind.schema())?,
        }
        return Ok(code::OK);
    }
    let all = kinds::known()?.all(db).await?;
    match format {
        Format::Json => {
            let docs: Vec<Value> = all
                .iter()
                .map(|(name, k)| json!({ "kind": name, "source": k.source, "schemaHash": k.kind.schema_hash(), "schema": k.kind.schema() }))
                .collect();
            render::json(&docs)?;
        }
        Format::Table => {
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|(name, k)| {
                    vec![
                        name.clone(),
                        k.kind.queue().to_owned(),
                        k.kind.max_attempts().to_string(),
                        k.kind.sequence().unwrap_or("-").to_owned(),
                        k.kind.concurrency().map_or_else(|| "-".to_owned(), |n| n.to_string()),
                        match k.source {
                            KindSource::Recorded => "recorded".to_owned(),
                            _ => "built in".to_owned(),
                        },
                        k.recorded.as_ref().map_or_else(|| "-".to_owned(), |r| time(r.updated_at)),
                        k.kind.schema_hash().get(..12).unwrap_or_default().to_owned(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["KIND", "QUEUE", "MAX ATTEMPTS", "SEQUENCE", "LIMIT", "SOURCE", "RECORDED", "SCHEMA"], &rows)
            );
        }
    }
    Ok(code::OK)
}
