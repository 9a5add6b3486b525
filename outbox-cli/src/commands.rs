//! What each command does.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use outbox_core::ops::{self, JobFilter};
use outbox_core::{EnqueueOpts, JobRecord, JobStatus, Worker};
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::cli::{Cli, Command, EnqueueArgs, ListArgs, ReconcileArgs, RetryArgs, WorkArgs};
use crate::db;
use crate::duration;
use crate::fail::{Failure, Result, code};
use crate::kinds::{self, Source};
use crate::render::{self, Format, opt_time, short, table, time};

/// Runs the command; the exit code on success (reconcile may return one for discrepancies).
pub(crate) async fn run(cli: Cli) -> Result<u8> {
    let Cli { database_url, format, command } = cli;
    init_logs(matches!(command, Command::Work(_)));
    let create = matches!(command, Command::Migrate);
    let db = db::open(&database_url, create).await?;
    match command {
        Command::Migrate => migrate(&db, &database_url, format).await,
        Command::Enqueue(args) => enqueue(&db, args, format).await,
        Command::List(args) => list(&db, args, format).await,
        Command::Get { id } => get(&db, &id, format).await,
        Command::Stats { window, limit } => stats(&db, window, limit, format).await,
        Command::Queues => queues(&db, format).await,
        Command::Retry(args) => retry(&db, args, format).await,
        Command::Cancel { id } => cancel(&db, &id, format).await,
        Command::Purge { status, older_than } => purge(&db, &status, older_than, format).await,
        Command::Schema { kind } => schema(&db, kind.as_deref(), format).await,
        Command::Reconcile(args) => reconcile(&db, args, format).await,
        Command::Work(args) => work(&db, args).await,
    }
}

/// Logs go to stderr: warnings by default, progress too for `work`; `OUTBOX_LOG` (an env-filter
/// directive such as `info` or `outbox_core=debug`) overrides.
fn init_logs(work: bool) {
    let default = if work { "info" } else { "warn" };
    let filter = std::env::var("OUTBOX_LOG").unwrap_or_else(|_| default.to_owned());
    let filter =
        tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).try_init();
}

async fn migrate(db: &DatabaseConnection, url: &str, format: Format) -> Result<u8> {
    use sea_orm_migration::MigratorTrait;
    let pending = outbox_core::Migrator::get_pending_migrations(db)
        .await
        .map_err(|e| Failure::error(format!("reading the migrations: {e}")))?;
    let applied: Vec<String> = pending.iter().map(|m| m.name().to_owned()).collect();
    outbox_core::migrate(db).await?;
    match format {
        Format::Json => render::json(&json!({ "database": db::shown(&db::url(url)), "applied": applied }))?,
        Format::Table if applied.is_empty() => println!("{}: already up to date", db::shown(&db::url(url))),
        Format::Table => println!("{}: applied {}", db::shown(&db::url(url)), applied.join(", ")),
    }
    Ok(code::OK)
}

/// The payload argument: JSON text, `@file`, or `-` for stdin.
fn payload(arg: &str) -> Result<Value> {
    let (text, from) = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::error(format!("reading the payload from stdin: {e}")))?;
        (text, "stdin".to_owned())
    } else if let Some(path) = arg.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::invalid(format!("cannot read the payload file `{path}`: {e}")))?;
        (text, format!("`{path}`"))
    } else {
        (arg.to_owned(), "--payload".to_owned())
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::invalid(format!("{from} is not valid JSON: {e}"))
            .hint("quote the payload for your shell, e.g. --payload '{\"path\": \"a.txt\"}'")
    })
}

async fn enqueue(db: &DatabaseConnection, args: EnqueueArgs, format: Format) -> Result<u8> {
    let payload = payload(&args.payload)?;
    let known = kinds::resolve(db, &args.kind).await?;
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
    let enqueued = outbox_core::enqueue_raw(db, &known.kind, payload, opts).await?;
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

/// `--since`: a duration ago or an RFC 3339 time.
fn since(arg: &str) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(arg) {
        return Ok(t.with_timezone(&Utc));
    }
    let ago = duration::parse(arg).map_err(|e| {
        Failure::invalid(format!("invalid value `{arg}` for --since: {e}"))
            .hint("or give a time like 2026-11-22T10:00:00Z")
    })?;
    let ago =
        chrono::Duration::from_std(ago).map_err(|_| Failure::invalid(format!("--since `{arg}` is too far back")))?;
    Ok(Utc::now() - ago)
}

fn job_rows(jobs: &[JobRecord]) -> Vec<Vec<String>> {
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

async fn list(db: &DatabaseConnection, args: ListArgs, format: Format) -> Result<u8> {
    let filter = JobFilter {
        status: args.status,
        kind: args.kind,
        queue: args.queue,
        since: args.since.as_deref().map(since).transpose()?,
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

fn pretty(text: Option<&str>) -> String {
    match text.map(|t| serde_json::from_str::<Value>(t).map_or_else(|_| t.to_owned(), |v| v.to_string())) {
        Some(t) => t,
        None => "-".to_owned(),
    }
}

async fn get(db: &DatabaseConnection, id: &str, format: Format) -> Result<u8> {
    let job = ops::get(db, id).await?;
    let history = ops::history(db, id).await?;
    if format == Format::Json {
        render::json(&json!({ "job": job, "history": history }))?;
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
        ("schema hash", job.schema_hash.clone()),
        ("last error", job.last_error.clone().unwrap_or_else(|| "-".into())),
        ("payload", pretty(Some(&job.payload))),
        ("output", pretty(job.output.as_deref())),
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
                e.event.clone(),
                e.attempt.to_string(),
                e.worker.clone().unwrap_or_else(|| "-".into()),
                short(e.error.as_deref().unwrap_or(""), 80),
            ]
        })
        .collect();
    print!("{}", table(&["AT", "EVENT", "ATTEMPT", "WORKER", "ERROR"], &rows));
    Ok(code::OK)
}

fn section(title: &str, headers: &[&str], rows: &[Vec<String>]) {
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

async fn stats(db: &DatabaseConnection, window: std::time::Duration, limit: u64, format: Format) -> Result<u8> {
    let mut stats = ops::stats(db, window).await?;
    stats.failed.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    stats.duplicates.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    if format == Format::Json {
        render::json(&stats)?;
        return Ok(code::OK);
    }
    let w = duration::human(window);
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
    let ms = |v: f64| duration::human(std::time::Duration::from_millis(v.max(0.0) as u64));
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
    Ok(code::OK)
}

async fn queues(db: &DatabaseConnection, format: Format) -> Result<u8> {
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

async fn retry(db: &DatabaseConnection, args: RetryArgs, format: Format) -> Result<u8> {
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
    let id = args.id.ok_or_else(|| Failure::invalid("give a job id or --failed"))?;
    ops::retry(db, &id).await?;
    match format {
        Format::Json => render::json(&json!({ "retried": 1, "id": id }))?,
        Format::Table => println!("retried {id}: pending again, attempts start over"),
    }
    Ok(code::OK)
}

async fn cancel(db: &DatabaseConnection, id: &str, format: Format) -> Result<u8> {
    ops::cancel(db, id).await?;
    match format {
        Format::Json => render::json(&json!({ "cancelled": 1, "id": id }))?,
        Format::Table => println!("cancelled {id}"),
    }
    Ok(code::OK)
}

async fn purge(
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
        Format::Table => println!("purged {n} {} job(s) older than {}", names.join("/"), duration::human(older_than)),
    }
    Ok(code::OK)
}

async fn schema(db: &DatabaseConnection, kind: Option<&str>, format: Format) -> Result<u8> {
    if let Some(name) = kind {
        let known = kinds::resolve(db, name).await?;
        match format {
            Format::Json => render::json(&json!({
                "kind": name,
                "source": known.source,
                "schemaHash": known.kind.schema_hash(),
                "queue": known.kind.queue(),
                "maxAttempts": known.kind.max_attempts(),
                "schema": known.kind.schema(),
            }))?,
            Format::Table => render::json(known.kind.schema())?,
        }
        return Ok(code::OK);
    }
    let all = kinds::all(db).await?;
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
                        match k.source {
                            Source::BuiltIn => "built in".to_owned(),
                            Source::Recorded => "recorded".to_owned(),
                        },
                        k.recorded.as_ref().map_or_else(|| "-".to_owned(), |r| time(r.updated_at)),
                        k.kind.schema_hash()[..12].to_owned(),
                    ]
                })
                .collect();
            print!("{}", table(&["KIND", "QUEUE", "MAX ATTEMPTS", "SOURCE", "RECORDED", "SCHEMA"], &rows));
        }
    }
    Ok(code::OK)
}

/// A progress bar on stderr, redrawn in place.
fn draw(p: outbox_fs::Progress) {
    let total = p.jobs_total.max(1);
    let done = p.jobs_done.min(total);
    let filled = usize::try_from(done * 30 / total).unwrap_or(30);
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\rreconciling [{}{}] {done}/{} jobs {:>3}%",
        "#".repeat(filled),
        ".".repeat(30 - filled),
        p.jobs_total,
        done * 100 / total
    );
    let _ = err.flush();
}

async fn reconcile(db: &DatabaseConnection, args: ReconcileArgs, format: Format) -> Result<u8> {
    let files = match &args.root {
        Some(dir) => Some(reconcile_files(db, dir, &args, format).await?),
        None => None,
    };
    let aws = if args.aws {
        let clients = outbox_aws::Aws::connect(outbox_aws::AwsOpts::new()).await?;
        let mut opts = outbox_aws::ReconcileOpts::new();
        if let Some(n) = args.max_listed {
            opts = opts.max_listed(n);
        }
        Some(outbox_aws::reconcile(db, &clients, opts).await?)
    } else {
        None
    };
    match format {
        // Files only: the filesystem report itself; with --aws, both under their names.
        Format::Json if !args.aws => render::json(&files)?,
        Format::Json => render::json(&json!({ "files": files, "aws": aws }))?,
        Format::Table => {
            if let Some(report) = &files {
                print_files(report);
            }
            if let Some(report) = &aws {
                print_aws(report);
            }
        }
    }
    let clean =
        files.as_ref().is_none_or(outbox_fs::Report::is_clean) && aws.as_ref().is_none_or(outbox_aws::Report::is_clean);
    Ok(if clean { code::OK } else { code::DISCREPANCIES })
}

async fn reconcile_files(
    db: &DatabaseConnection,
    dir: &std::path::Path,
    args: &ReconcileArgs,
    format: Format,
) -> Result<outbox_fs::Report> {
    let root = outbox_fs::Root::open(dir)?;
    let mut opts = outbox_fs::ReconcileOpts::new();
    if let Some(n) = args.max_listed {
        opts = opts.max_listed(n);
    }
    let bar = args.progress || (format == Format::Table && std::io::stderr().is_terminal());
    if bar {
        opts = opts.on_progress(draw);
    }
    let report = outbox_fs::reconcile(db, &root, opts).await?;
    if bar {
        eprintln!();
    }
    Ok(report)
}

fn print_files(report: &outbox_fs::Report) {
    if !report.discrepancies.is_empty() {
        let rows: Vec<Vec<String>> = report
            .discrepancies
            .iter()
            .map(|d| vec![d.path.clone(), d.kind.to_string(), d.job_kind.clone(), d.job_id.clone()])
            .collect();
        print!("{}", table(&["PATH", "PROBLEM", "KIND", "JOB"], &rows));
    }
    println!(
        "files: checked {} path(s) from {} completed job(s): {} ok, {} missing, {} content changed, \
         {} should be absent, {} unreadable, {} outside the root{}",
        report.paths_checked,
        report.jobs_scanned,
        report.ok,
        report.missing,
        report.content_changed,
        report.should_be_absent,
        report.unreadable,
        report.outside_root,
        unlisted(report.unlisted)
    );
}

fn print_aws(report: &outbox_aws::Report) {
    if !report.discrepancies.is_empty() {
        let rows: Vec<Vec<String>> = report
            .discrepancies
            .iter()
            .map(|d| {
                let problem =
                    serde_json::to_value(d.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
                let detail = d.detail.as_deref().map(|t| format!(": {}", short(t, 60))).unwrap_or_default();
                vec![format!("{} {}", d.resource_type, d.resource_id), format!("{problem}{detail}"), d.job_id.clone()]
            })
            .collect();
        print!("{}", table(&["RESOURCE", "PROBLEM", "JOB"], &rows));
    }
    println!(
        "aws: checked {} resource(s) from {} completed job(s): {} ok, {} missing, {} should be absent, {} not checkable{}",
        report.resources_checked,
        report.jobs_scanned,
        report.ok,
        report.missing,
        report.should_be_absent,
        report.check_failed,
        unlisted(report.unlisted)
    );
}

fn unlisted(n: u64) -> String {
    if n > 0 { format!(" ({n} not listed)") } else { String::new() }
}

async fn work(db: &DatabaseConnection, args: WorkArgs) -> Result<u8> {
    use tokio::signal::unix::{SignalKind, signal};
    // Listen before the worker starts, so an early Ctrl-C or SIGTERM still stops it gracefully.
    let listen = |kind| signal(kind).map_err(|e| Failure::error(format!("cannot listen for signals: {e}")));
    let (mut term, mut int) = (listen(SignalKind::terminate())?, listen(SignalKind::interrupt())?);
    let root = outbox_fs::Root::open(&args.root)?;
    let extractor: Option<Arc<dyn outbox_fs::extract::Extractor>> = if let Some(program) = args.claude_cli {
        let mut opts = outbox_fs::extract::CliOpts::default();
        opts.program = program;
        Some(Arc::new(
            outbox_fs::extract::ClaudeCli::new(opts).map_err(|e| Failure::invalid(format!("--claude-cli: {e}")))?,
        ))
    } else if let Some(model) = args.anthropic_model {
        let api = outbox_fs::extract::AnthropicApi::new(outbox_fs::extract::ApiOpts::new(model))
            .map_err(|e| Failure::invalid(format!("--anthropic-model: {e}")).hint("set ANTHROPIC_API_KEY"))?;
        Some(Arc::new(api))
    } else {
        None
    };
    let mut builder = Worker::builder(db).concurrency(args.concurrency);
    if !args.queues.is_empty() {
        builder = builder.queues(args.queues.clone());
    }
    let mut handled = vec!["create_file", "delete_file"];
    if extractor.is_some() {
        handled.push("claude_extraction");
    }
    builder = outbox_fs::register_handlers(builder, &root, extractor);
    if args.aws {
        let aws = outbox_aws::Aws::connect(outbox_aws::AwsOpts::new()).await?;
        builder = outbox_aws::register_handlers(builder, &aws);
        handled.push("sync_aws");
    }
    let worker = builder.build().await?;
    let id = worker.id().to_owned();
    let queues = if args.queues.is_empty() { "all".to_owned() } else { args.queues.join(", ") };
    tracing::info!(worker = %id, kinds = %handled.join(","), queues = %queues, concurrency = args.concurrency,
        root = %args.root.display(), "worker running; stop with Ctrl-C or SIGTERM");
    let stop = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: finishing running jobs"),
            _ = int.recv() => tracing::info!("interrupted: finishing running jobs"),
        }
    };
    worker.run_until(stop).await?;
    tracing::info!(worker = %id, "worker stopped");
    Ok(code::OK)
}
