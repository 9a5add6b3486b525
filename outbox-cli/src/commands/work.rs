//! `work`: a worker with the built-in handlers until Ctrl-C or SIGTERM.

use std::sync::Arc;

use outbox::{JobStatus, Retention, Schedule, Worker};
use sea_orm::DatabaseConnection;
use serde_json::Value;

use crate::cli::WorkArgs;
use crate::fail::{Failure, Result, code};

pub(super) async fn work(db: &DatabaseConnection, args: WorkArgs) -> Result<u8> {
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
        let mut opts = outbox_fs::extract::ApiOpts::new(model);
        if let Some(url) = args.anthropic_base_url {
            opts.base_url = url;
        }
        let api = outbox_fs::extract::AnthropicApi::new(opts)
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
    let aws = if args.aws { Some(outbox_aws::Aws::connect(outbox_aws::AwsOpts::new()).await?) } else { None };
    if let Some(aws) = &aws {
        builder = outbox_aws::register_handlers(builder, aws);
        handled.push("sync_aws");
    }
    for (kind, rate) in &args.rates {
        builder = builder.rate(kind.clone(), *rate);
    }
    for (kind, n) in &args.limits {
        builder = builder.concurrency_limit(kind.clone(), *n);
    }
    for (kind, d) in &args.timeouts {
        builder = match kind {
            Some(kind) => builder.kind_timeout(kind.clone(), *d),
            None => builder.timeout(*d),
        };
    }
    builder = builder.retention(
        Retention::new()
            .max_age(JobStatus::Completed, args.keep_completed.0)
            .max_age(JobStatus::Failed, args.keep_failed.0)
            .max_age(JobStatus::Cancelled, args.keep_failed.0),
    );
    if let Some(path) = &args.schedules {
        for schedule in schedules(path)? {
            builder = builder.schedule(schedule);
        }
    }
    if args.reconcile {
        builder = outbox_fs::reconcile_at_start(builder, &root);
        if let Some(aws) = &aws {
            builder = outbox_aws::reconcile_at_start(builder, aws);
        }
    }
    // Building waits out a database that is unavailable for now (a full disk, a restarting server); a signal
    // meanwhile stops the process rather than waiting behind it.
    let worker = tokio::select! {
        worker = builder.build() => worker?,
        _ = term.recv() => return Ok(stopped_before_start("SIGTERM")),
        _ = int.recv() => return Ok(stopped_before_start("interrupted")),
    };
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
    // The worker logs `worker stopped` itself.
    worker.run_until(stop).await?;
    Ok(code::OK)
}

fn stopped_before_start(why: &str) -> u8 {
    tracing::info!("{why} before the worker started: nothing was claimed");
    code::OK
}

/// One entry of the `--schedules` file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleEntry {
    name: String,
    schedule: String,
    kind: String,
    payload: Value,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    catch_up: bool,
}

/// The schedules of the file at `path`, each checked (its kind built in, its payload valid) before the
/// worker starts.
fn schedules(path: &std::path::Path) -> Result<Vec<Schedule>> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| Failure::invalid(format!("--schedules {shown}: {e}")))?;
    let entries: Vec<ScheduleEntry> = serde_json::from_str(&text).map_err(|e| {
        Failure::invalid(format!("--schedules {shown}: {e}"))
            .hint("expected [{\"name\", \"schedule\", \"kind\", \"payload\", \"time_zone\"?, \"catch_up\"?}]")
    })?;
    let kinds = crate::kinds::built_in()?;
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let fail = |e: String| Failure::invalid(format!("--schedules {shown}: schedule `{}`: {e}", entry.name));
        let kind = kinds
            .iter()
            .find(|k| k.name() == entry.kind)
            .cloned()
            .ok_or_else(|| fail(format!("`{}` is not a kind `outbox work` runs", entry.kind)))?;
        // The payload of a sample tick must be valid now, not at the first tick.
        kind.validate(&with_tick(&entry.payload, &outbox::chrono::Utc::now().to_rfc3339()))
            .map_err(|e| fail(e.to_string()))?;
        let payload = entry.payload.clone();
        let build = move |tick: outbox::chrono::DateTime<outbox::chrono::Utc>| with_tick(&payload, &tick.to_rfc3339());
        let mut schedule = match entry.schedule.trim().strip_prefix("every ") {
            Some(every) => {
                let interval = outbox_server::duration::parse(every).map_err(fail)?;
                Schedule::raw_every(entry.name.clone(), kind, interval, build)
            }
            None => Schedule::raw_cron(entry.name.clone(), kind, entry.schedule.trim(), build),
        };
        if let Some(tz) = &entry.time_zone {
            schedule = schedule.time_zone(tz);
        }
        if entry.catch_up {
            schedule = schedule.catch_up();
        }
        schedule.check().map_err(|e| Failure::invalid(format!("--schedules {shown}: {e}")))?;
        out.push(schedule);
    }
    Ok(out)
}

/// `payload` with `{tick}` in its strings replaced by `tick`.
fn with_tick(payload: &Value, tick: &str) -> Value {
    match payload {
        Value::String(s) => Value::String(s.replace("{tick}", tick)),
        Value::Array(items) => Value::Array(items.iter().map(|v| with_tick(v, tick)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), with_tick(v, tick))).collect()),
        other => other.clone(),
    }
}
