//! `work`: a worker with the built-in handlers until Ctrl-C or SIGTERM.

use std::sync::Arc;

use outbox_core::Worker;
use sea_orm::DatabaseConnection;

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
    for (kind, n) in &args.limits {
        builder = builder.concurrency_limit(kind.clone(), *n);
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
