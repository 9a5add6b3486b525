//! What each command does.

mod claims;
mod flow;
mod inspect;
mod jobs;
mod reconcile;
mod serve;
mod work;
mod workflows;

use sea_orm::DatabaseConnection;

use serde_json::json;
#[cfg(test)]
pub(crate) use serve::opts as serve_opts;

use crate::cli::{Cli, Command};
use crate::db;
use crate::fail::{Result, code};
use crate::render::{self, Format};

/// Runs the command; the exit code on success (reconcile may return one for discrepancies).
pub(crate) async fn run(cli: Cli) -> Result<u8> {
    let Cli { database_url, format, command } = cli;
    crate::logs::init(matches!(command, Command::Work(_) | Command::Serve(_)));
    // What is printed from the command's own definition needs no database.
    match command {
        Command::Openapi => {
            let text = outbox_server::openapi_json()
                .map_err(|e| crate::fail::Failure::error(format!("serializing the openapi document: {e}")))?;
            return print(format!("{text}\n").as_bytes());
        }
        Command::Completions { shell } => {
            let mut definition = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut definition, "outbox", &mut script);
            return print(&script);
        }
        _ => {}
    }
    // `serve` checks its options before it opens the database, and waits for the database like `work`.
    if let Command::Serve(args) = command {
        return serve::serve(&database_url, args).await;
    }
    let create = matches!(command, Command::Migrate);
    let db = db::open(&database_url, create, matches!(command, Command::Work(_))).await?;
    match command {
        Command::Migrate => migrate(&db, &database_url, format).await,
        Command::Enqueue(args) => jobs::enqueue(&db, args, format).await,
        Command::List(args) => jobs::list(&db, args, format).await,
        Command::Get { id } => jobs::get(&db, &id, format).await,
        Command::Stats { window, limit } => inspect::stats(&db, window, limit, format).await,
        Command::Queues => inspect::queues(&db, format).await,
        Command::Workers => inspect::workers(&db, format).await,
        Command::Schedules => inspect::schedules(&db, format).await,
        Command::Retry(args) => jobs::retry(&db, args, format).await,
        Command::Cancel(args) => jobs::cancel(&db, args, format).await,
        Command::Purge { status, older_than } => jobs::purge(&db, &status, older_than, format).await,
        Command::Schema { kind } => inspect::schema(&db, kind.as_deref(), format).await,
        Command::Reconcile(args) => reconcile::reconcile(&db, args, format).await,
        Command::Work(args) => work::work(&db, args).await,
        Command::DefineKind(args) => claims::define_kind(&db, args, format).await,
        Command::Claim(args) => claims::claim(&db, args).await,
        Command::Complete(args) => claims::complete(&db, args, format).await,
        Command::Fail(args) => claims::fail(&db, args, format).await,
        Command::Extend(args) => claims::extend(&db, args, format).await,
        Command::Snooze(args) => claims::snooze(&db, args, format).await,
        Command::Pause(args) => flow::pause(&db, args, format).await,
        Command::Resume(args) => flow::resume(&db, args, format).await,
        Command::Flow(args) => flow::show(&db, args, format).await,
        Command::Workflow(command) => workflows::run(&db, command, format).await,
        Command::Weight(args) => flow::weight(&db, args, format).await,
        // Run above, before the database is opened.
        Command::Serve(_) | Command::Openapi | Command::Completions { .. } => Ok(code::OK),
    }
}

async fn migrate(db: &DatabaseConnection, url: &str, format: Format) -> Result<u8> {
    let applied = outbox::pending_migrations(db).await?;
    outbox::migrate(db).await?;
    match format {
        Format::Json => render::json(&json!({ "database": db::shown(&db::url(url)), "applied": applied }))?,
        Format::Table if applied.is_empty() => println!("{}: already up to date", db::shown(&db::url(url))),
        Format::Table => println!("{}: applied {}", db::shown(&db::url(url)), applied.join(", ")),
    }
    Ok(code::OK)
}

/// Writes what a command prints from its own definition; a reader that stopped early (`| head`) is not a
/// failure.
fn print(bytes: &[u8]) -> Result<u8> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(code::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code::OK),
        Err(e) => Err(crate::fail::Failure::error(format!("writing to stdout: {e}"))),
    }
}
